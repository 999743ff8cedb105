//! `pincer chat NAME` beside a running daemon attaches to it over the control
//! socket (the group's one live session answers, no second CLI starts), and
//! `pincer tasks …` / `pincer groups …` tell the daemon what they changed.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;
use tokio::io::AsyncWriteExt;

use crate::support::fake_api::{self, FakeApi, Reply, Script};
use crate::support::fake_bot::{ChatKind, FakeBot, TgChat};
use crate::support::harness::{said, Sandbox, PATIENCE};

/// `pincer --config CONFIG ARGS…` with `input` on stdin, to its end.
async fn pincer(config: &Path, args: &[&str], input: &str) -> Output {
    #[allow(clippy::disallowed_methods)] // runs the pincer binary under test
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_pincer"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove(crate::support::cli::CLAUDE_BIN_ENV)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the pincer binary starts");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    tokio::time::timeout(PATIENCE, child.wait_with_output()).await.expect("pincer ends in time").unwrap()
}

/// Waits until the daemon listens on its control socket.
async fn wait_for_socket(data_dir: &Path) -> std::path::PathBuf {
    let socket = pincer::control::socket_path(data_dir);
    tokio::time::timeout(PATIENCE, async {
        while !socket.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the daemon listens on its control socket");
    socket
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_terminal_chat_beside_the_daemon_talks_to_its_live_session() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("team", None).await;
    let config = sandbox.write_config();
    let daemon = sandbox.spawn_daemon();
    let socket = wait_for_socket(&sandbox.config.data_dir).await;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "only the owner may connect");

    let first = pincer(&config, &["chat", "team"], "hello\n").await;
    assert!(first.status.success(), "{first:?}");
    assert_eq!(said(&first.stdout).trim(), "ECHO: hello");
    let second = pincer(&config, &["chat", "team"], "again\n").await;
    assert!(second.status.success(), "{second:?}");
    assert_eq!(said(&second.stdout).trim(), "ECHO: again");

    // Both terminals spoke to the daemon's one process: it was started once,
    // and the second turn carried the first one's conversation.
    let store = sandbox.store().await;
    let started: Vec<_> = store
        .journal()
        .session_events(&group)
        .await
        .unwrap()
        .into_iter()
        .filter(|(kind, _)| kind == "started" || kind == "resumed")
        .collect();
    assert_eq!(started.len(), 1, "one CLI process for the group: {started:?}");
    let last = api.main_requests().last().unwrap().all_text();
    assert!(last.contains("hello") && last.contains("again"), "one conversation: {last}");
    store.close().await;
    daemon.stop().await;
    assert!(!socket.exists(), "the socket goes with the daemon");
}

#[tokio::test]
async fn an_attached_terminal_sees_the_groups_chat_replies_which_still_reach_the_chat() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let chat = TgChat { id: -100_900, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() };
    bot.add_chat(&chat);
    let mut sandbox = Sandbox::new(&api);
    sandbox.use_telegram(&bot);
    let bound = GroupSettings { chat: Some(ChatAddress::telegram(chat.id, None)), ..GroupSettings::default() };
    sandbox.add_group_with("team", bound).await;
    let config = sandbox.write_config();
    let daemon = sandbox.spawn_daemon();
    wait_for_socket(&sandbox.config.data_dir).await;

    let out = pincer(&config, &["chat", "team"], "from the terminal\n").await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(said(&out.stdout).trim(), "ECHO: from the terminal");
    let sent = bot.wait_sent(chat.id, 1).await;
    assert_eq!(sent[0].text, "ECHO: from the terminal", "the chat got the reply too");
    daemon.stop().await;
}

#[tokio::test]
async fn a_second_terminal_chat_beside_a_terminal_chat_is_refused_with_what_to_do() {
    let echo = fake_api::echo();
    let slow: Script = Arc::new(move |req| Reply::slow(Duration::from_secs(3), echo(req)));
    let api = FakeApi::start(slow).await;
    let sandbox = Sandbox::new(&api);
    sandbox.add_group("team", None).await;
    let config = sandbox.write_config();
    let first = tokio::spawn({
        let config = config.clone();
        async move { pincer(&config, &["chat", "team"], "hello\n").await }
    });
    // The first chat holds the data directory while its reply is slow.
    api.wait_for_requests(1, PATIENCE).await;
    let second = pincer(&config, &["chat", "team"], "me too\n").await;
    assert!(!second.status.success(), "{second:?}");
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(said.contains("already using") && said.contains("end that one first"), "{said}");
    let first = first.await.unwrap();
    assert!(first.status.success(), "{first:?}");
}

#[tokio::test]
async fn a_task_run_now_is_acted_on_at_once_not_at_the_next_poll() {
    let api = FakeApi::start(fake_api::echo()).await;
    let mut sandbox = Sandbox::new(&api);
    // Without the notice, the daemon would see the change only after an hour.
    sandbox.config.scheduler.poll_interval = Duration::from_secs(3600);
    sandbox.add_group("team", None).await;
    let config = sandbox.write_config();
    let daemon = sandbox.spawn_daemon();
    wait_for_socket(&sandbox.config.data_dir).await;

    let added = pincer(&config, &["tasks", "add", "team", "--every", "1d", "--prompt", "daily digest"], "").await;
    assert!(added.status.success(), "{added:?}");
    assert!(stdout(&added).contains("the running pincer was told"), "{}", stdout(&added));
    let now = pincer(&config, &["tasks", "run-now", "1"], "").await;
    assert!(now.status.success(), "{now:?}");

    let requests = api.wait_for_requests(1, PATIENCE).await;
    assert!(requests[0].all_text().contains("daily digest"), "the run reached the agent");
    daemon.stop().await;
}

#[tokio::test]
async fn groups_set_changes_a_live_sessions_tool_policy_at_once() {
    let script = fake_api::scripted(vec![("RUNIT", Reply::bash("touch made-it && echo ran-it", "probe"))]);
    let api = FakeApi::start(script).await;
    let sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("team", Some(&[])).await;
    let config = sandbox.write_config();
    let daemon = sandbox.spawn_daemon();
    wait_for_socket(&sandbox.config.data_dir).await;

    let denied = pincer(&config, &["chat", "team"], "RUNIT please\n").await;
    assert!(stdout(&denied).contains("TOOL_RESULT(err=True)"), "Bash is not allowed yet: {}", stdout(&denied));
    let set = pincer(&config, &["groups", "set", "team", "--allow", "Bash"], "").await;
    assert!(set.status.success() && stdout(&set).contains("the running pincer was told"), "{set:?}");
    let allowed = pincer(&config, &["chat", "team"], "RUNIT again\n").await;
    assert!(stdout(&allowed).contains("TOOL_RESULT(err=False):ran-it"), "allowed now: {}", stdout(&allowed));

    // A group that could never run Bash was not offered it: once it may, the
    // idle process closes and the next message resumes the same session in
    // one that offers it (pincer itself is not restarted).
    let store = sandbox.store().await;
    let events: Vec<_> =
        store.journal().session_events(&group).await.unwrap().into_iter().map(|(kind, _)| kind).collect();
    assert_eq!(events, ["started", "tools_changed", "resumed"]);
    store.close().await;
    daemon.stop().await;
}

#[tokio::test]
async fn pincer_chat_attach_sends_files_with_the_first_line_on_its_own_and_beside_the_daemon() {
    let api = FakeApi::start(fake_api::echo()).await;
    let sandbox = Sandbox::new(&api);
    sandbox.add_group("team", None).await;
    let config = sandbox.write_config();
    let shot = sandbox.root().join("shot.png");
    let mut png = Vec::new();
    image::RgbImage::from_pixel(40, 30, image::Rgb([200, 10, 10]))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    std::fs::write(&shot, &png).unwrap();
    let notes = sandbox.root().join("notes.txt");
    std::fs::write(&notes, "first point\nsecond point\n").unwrap();
    let (shot, notes) = (shot.to_str().unwrap(), notes.to_str().unwrap());

    // No daemon: the chat's own engine prepares them.
    let out =
        pincer(&config, &["chat", "team", "--attach", shot, "--attach", notes], "what do you see?\nand then?\n").await;
    assert!(out.status.success(), "{out:?}");
    let printed = stdout(&out);
    assert!(printed.contains("ECHO: what do you see?"), "{printed}");
    assert!(printed.contains("[image \"shot.png\", image/png") && printed.contains("shown to you below"), "{printed}");
    assert!(printed.contains("[document \"notes.txt\", text/plain"), "{printed}");
    let first = &api.main_requests()[0];
    let blocks = first.messages().iter().rev().find(|m| m["role"] == "user").cloned().unwrap_or_default();
    let images = blocks["content"].as_array().into_iter().flatten().filter(|b| b["type"] == "image").count();
    assert_eq!(images, 1, "the image was shown to the model");
    // The second line waited behind the first (while its files were
    // prepared), so both may come in one turn: the files are named once.
    let prompts: String = api.main_requests().iter().map(|r| r.last_user_prompt()).collect::<Vec<_>>().join("\n");
    assert!(prompts.contains("and then?"), "{prompts}");
    assert_eq!(prompts.matches("notes.txt\"").count(), 1, "the files went with the first line only: {prompts}");
    let inbox = sandbox.group_dir("team").join("inbox");
    let kept: Vec<_> = walk(&inbox).into_iter().filter(|p| p.to_string_lossy().ends_with("notes.txt")).collect();
    assert_eq!(kept.len(), 1, "kept in the group's inbox: {kept:?}");
    assert_eq!(std::fs::read_to_string(&kept[0]).unwrap(), "first point\nsecond point\n");

    // A file that is not there is said before anything starts.
    let missing = pincer(&config, &["chat", "team", "--attach", "/nonexistent/x.pdf"], "hi\n").await;
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot attach /nonexistent/x.pdf"), "{missing:?}");

    // Beside the daemon, with no line: the file goes alone.
    let daemon = sandbox.spawn_daemon();
    wait_for_socket(&sandbox.config.data_dir).await;
    let out = pincer(&config, &["chat", "team", "--attach", notes], "").await;
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("[document \"notes.txt\""), "{}", stdout(&out));
    daemon.stop().await;
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
