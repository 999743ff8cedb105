//! The console channel: piped input is answered, replies from background work
//! are waited for, and the `pincer` binary itself works the README's way.

use std::process::Stdio;

use pincer::app::console_chat;
use pincer::channel::console::{ChatEnd, ConsoleOptions};
use tokio::io::AsyncWriteExt;

use crate::support::cli::{claude_bin, cli_env};
use crate::support::fake_api::{self, FakeApi};
use crate::support::harness::{said, Sandbox, PATIENCE};

#[tokio::test]
async fn piped_chat_prints_replies_and_waits_for_background_work() {
    let api = FakeApi::start(fake_api::bg_bash()).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("console", Some(&["Bash"])).await;
    let pincer = sandbox.start().await;
    let opts = ConsoleOptions { group, sender: "me".into(), wait_limit: PATIENCE, attached: false, attach: vec![] };
    let input: &[u8] = b"hello\n\nplease run BGBASH now\n";
    let mut output = Vec::new();

    let end = console_chat(&pincer.engine, &opts, input, &mut output, pincer.shutdown.clone()).await.unwrap();
    assert_eq!(end, ChatEnd::Done);
    let printed = String::from_utf8(output).unwrap();
    let lines: Vec<_> = printed.lines().collect();
    // Both lines are written before the CLI starts its first turn (it first runs
    // the MCP handshake for pincer's tools), so "hello" may get a turn of its own
    // or share the first one: results are per turn.
    match lines.len() {
        3 => assert_eq!(lines[0], "ECHO: hello"),
        2 => assert!(api.main_requests()[0].all_text().contains("hello"), "hello reached the model"),
        _ => panic!("two or three replies, the follow-up last: {printed}"),
    }
    assert!(lines[lines.len() - 2].starts_with("AFTER_TOOL"), "{printed}");
    assert_eq!(lines[lines.len() - 1], "FOLLOWUP: saw task notification", "the follow-up was waited for: {printed}");
    pincer.stop().await;
}

#[tokio::test]
async fn the_binary_chats_through_a_pipe() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let root = sandbox.root();
    let home = root.join("home");
    let env_of = |args: &[&str]| {
        #[allow(clippy::disallowed_methods)] // runs the pincer binary under test
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_pincer"));
        cmd.args(args)
            .current_dir(root)
            .env("PINCER_CLAUDE__COMMAND", claude_bin())
            .env_remove("CLAUDECODE")
            // pincer rejects unknown PINCER_* variables, and this one is the tests' own.
            .env_remove(crate::support::cli::CLAUDE_BIN_ENV)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The CLI inherits pincer's environment, so the offline settings go through pincer.
        for (k, v) in cli_env(&api.base_url(), &home) {
            cmd.env(k, v);
        }
        cmd
    };
    let added = env_of(&["groups", "add", "piped"]).output().await.unwrap();
    assert!(added.status.success(), "{added:?}");
    assert!(root.join("groups/piped/CLAUDE.md").exists());

    let mut child = env_of(&["chat", "piped"]).spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"hi from a pipe\n").await.unwrap();
    let out = tokio::time::timeout(PATIENCE, child.wait_with_output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(said(&out.stdout).trim(), "ECHO: hi from a pipe", "{stdout}");

    let history = env_of(&["history", "piped", "--json"]).output().await.unwrap();
    let kinds: Vec<String> = String::from_utf8_lossy(&history.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["inbound", "result"]);

    let unknown = env_of(&["chat", "nobody"]).output().await.unwrap();
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("pincer groups add nobody"));
}

/// `pincer chat` shows a slow turn's status as lines of its own, before the
/// answer; a quick turn prints its answer alone.
#[tokio::test]
async fn a_slow_turn_prints_status_lines_before_its_answer() {
    // `after` leaves room for a warm quick turn on a busy machine.
    let slow = fake_api::Reply::slow(std::time::Duration::from_secs(7), fake_api::Reply::text("done SLOWLY"));
    let api = FakeApi::start(fake_api::scripted(vec![("SLOW", slow)])).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.progress.after = std::time::Duration::from_secs(4);
    sandbox.config.progress.every = std::time::Duration::from_secs(1);
    let group = sandbox.add_group("console", None).await;
    let pincer = sandbox.start().await;
    let opts = ConsoleOptions { group, sender: "me".into(), wait_limit: PATIENCE, attached: false, attach: vec![] };
    // The CLI's cold start first (seconds on a loaded machine, and its turn
    // may show a status): the quick turn below is then a warm one.
    let input: &[u8] = b"warm up\n";
    console_chat(&pincer.engine, &opts, input, &mut Vec::new(), pincer.shutdown.clone()).await.unwrap();
    let input: &[u8] = b"quick\n";
    let mut output = Vec::new();
    console_chat(&pincer.engine, &opts, input, &mut output, pincer.shutdown.clone()).await.unwrap();
    assert_eq!(String::from_utf8(output).unwrap(), "ECHO: quick\n", "a quick turn shows no status");

    let input: &[u8] = b"go SLOW\n";
    let mut output = Vec::new();
    console_chat(&pincer.engine, &opts, input, &mut output, pincer.shutdown.clone()).await.unwrap();
    let printed = String::from_utf8(output).unwrap();
    let lines: Vec<_> = printed.lines().collect();
    assert!(lines.len() >= 2, "{printed}");
    assert!(lines[..lines.len() - 1].iter().all(|l| l.starts_with("[status] Working… ")), "{printed}");
    assert_eq!(lines[lines.len() - 1], "done SLOWLY", "{printed}");
    pincer.stop().await;
}
