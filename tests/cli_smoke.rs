//! Smoke tests of the test harness itself: the real Claude Code CLI, spawned
//! directly (no pincer code), talks stream-json to us and to the fake Messages API.
//! If these fail, every end-to-end test will, so look here first.
//!
//! Run with `PINCER_TEST_CLAUDE=/path/to/claude cargo test --test cli_smoke`, or
//! after `cargo run -- setup`.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/fake_api.rs"]
mod fake_api;
#[path = "support/serve.rs"]
mod serve;

use std::{process::Stdio, time::Duration};

use fake_api::FakeApi;
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout, Command},
    time::timeout,
};

/// Generous: the CLI starts in ~0.5-1 s, but CI machines are slow.
const LINE_TIMEOUT: Duration = Duration::from_secs(30);

/// One CLI process with its stdin kept open, as pincer runs it.
struct Cli {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    _home: TempDir,
    _cwd: TempDir,
}

impl Cli {
    async fn spawn(api: &FakeApi, extra_args: &[&str]) -> Cli {
        let home = TempDir::new().unwrap();
        let cwd = TempDir::new().unwrap();
        // pincer starts processes only through claude::process; this test checks the
        // CLI and the fake API without any pincer code in between.
        #[allow(clippy::disallowed_methods)]
        let mut cmd = Command::new(cli::claude_bin());
        cmd.args(cli::stream_json_args())
            .args(extra_args)
            .current_dir(cwd.path())
            .envs(cli::cli_env(&api.base_url(), home.path()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for var in cli::ENV_TO_REMOVE {
            cmd.env_remove(var);
        }
        let mut child = cmd.spawn().expect("spawn the claude CLI");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        // Forwarded through eprintln! so libtest shows it only for failing tests.
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                eprintln!("claude stderr: {line}");
            }
        });
        Cli { child, stdin, stdout, _home: home, _cwd: cwd }
    }

    /// Writes one line; always serialized JSON, since a malformed line kills the CLI.
    async fn send(&mut self, line: Value) {
        let stdin = self.stdin.as_mut().expect("stdin already closed");
        let mut bytes = serde_json::to_vec(&line).unwrap();
        bytes.push(b'\n');
        stdin.write_all(&bytes).await.unwrap();
        stdin.flush().await.unwrap();
    }

    async fn send_user(&mut self, text: &str) {
        self.send(json!({
            "type": "user",
            "message": { "role": "user", "content": text },
            "parent_tool_use_id": null,
            "session_id": "",
        }))
        .await;
    }

    /// The next JSON line on stdout; panics on EOF or timeout.
    async fn next_json(&mut self) -> Value {
        loop {
            let line = timeout(LINE_TIMEOUT, self.stdout.next_line())
                .await
                .expect("timed out waiting for a CLI stdout line")
                .expect("read CLI stdout")
                .expect("CLI stdout closed early");
            if !line.starts_with('{') {
                continue;
            }
            return serde_json::from_str(&line).expect("CLI stdout line is JSON");
        }
    }

    /// Every stdout line up to and including the `n`th `result`.
    async fn until_results(&mut self, n: usize) -> Vec<Value> {
        let mut lines = Vec::new();
        let mut results = 0;
        while results < n {
            let line = self.next_json().await;
            if line["type"] == "result" {
                results += 1;
            }
            lines.push(line);
        }
        lines
    }

    /// Closes stdin and waits for the CLI to exit by itself (it flushes its session
    /// file then); kills it only if that takes too long.
    async fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        // Drain stdout so the CLI never blocks on a full pipe while exiting.
        let drain = async {
            while let Ok(Some(_)) = self.stdout.next_line().await {}
            self.child.wait().await
        };
        match timeout(Duration::from_secs(15), drain).await {
            Ok(status) => status.expect("wait for the CLI"),
            Err(_) => {
                self.child.kill().await.ok();
                panic!("the CLI did not exit within 15 s of stdin closing");
            }
        }
    }
}

fn results(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| l["type"] == "result").collect()
}

fn system_frames<'a>(lines: &'a [Value], subtype: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == "system" && l["subtype"] == subtype).collect()
}

#[tokio::test]
async fn echo_turn_round_trips_through_the_fake_api() {
    let api = FakeApi::start(fake_api::echo()).await;
    let mut cli = Cli::spawn(&api, &[]).await;

    cli.send_user("hello SMOKE1").await;
    let lines = cli.until_results(1).await;
    let result = results(&lines)[0];
    assert_eq!(result["subtype"], "success", "{result}");
    assert_eq!(result["result"], "ECHO: hello SMOKE1");

    // A second message on the same stdin is a second turn that carries the first.
    cli.send_user("second SMOKE2").await;
    let lines = cli.until_results(1).await;
    assert_eq!(results(&lines)[0]["result"], "ECHO: second SMOKE2");

    let main = api.main_requests();
    assert_eq!(main.len(), 2, "one streamed request per turn");
    assert!(main[1].all_text().contains("hello SMOKE1"));
    assert!(main[1].all_text().contains("ECHO: hello SMOKE1"));
    // 2.1.197 checks that the base URL answers (`HEAD /`) before its first
    // request; nothing else goes anywhere but the Messages endpoint.
    let other: Vec<String> = api.other_requests().into_iter().filter(|r| r != "HEAD /").collect();
    assert!(other.is_empty(), "{other:?}");

    assert!(cli.close().await.success());
}

#[tokio::test]
async fn background_bash_notifies_and_starts_a_follow_up_turn() {
    let api = FakeApi::start(fake_api::bg_bash()).await;
    let mut cli = Cli::spawn(&api, &["--allowedTools", "Bash"]).await;

    cli.send_user("please run BGBASH now").await;
    // Result #1 ends the turn that started the task; result #2 is the turn the CLI
    // starts by itself when the task ends, which needs stdin to stay open.
    let lines = cli.until_results(2).await;

    let started = system_frames(&lines, "task_started");
    assert_eq!(started.len(), 1, "{lines:#?}");
    assert_eq!(started[0]["task_type"], "local_bash");
    let notified = system_frames(&lines, "task_notification");
    assert_eq!(notified.len(), 1, "{lines:#?}");
    assert_eq!(notified[0]["status"], "completed");
    assert_eq!(notified[0]["task_id"], started[0]["task_id"]);

    let results = results(&lines);
    assert!(
        results[0]["result"]
            .as_str()
            .unwrap()
            .starts_with("AFTER_TOOL: TOOL_RESULT(err=False):Command running in background"),
        "{}",
        results[0]
    );
    assert_eq!(results[1]["result"], "FOLLOWUP: saw task notification");
    assert_eq!(results[1]["origin"]["kind"], "task-notification");

    let main = api.main_requests();
    assert_eq!(main.len(), 3, "tool call, after-tool, follow-up");
    let notification = main[2].task_notification().expect("follow-up request carries the task notification");
    assert!(notification.contains("<status>completed</status>"), "{notification}");

    assert!(cli.close().await.success());
}

/// A 2×1 PNG (one red, one blue pixel), as pincer's preparer would hand on.
const TINY_PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x7B, 0x40, 0xE8, 0xDD, 0x00, 0x00, 0x00, 0x0F, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0xF8, 0xCF, 0xC0, 0x00, 0x42, 0x0C, 0xFF, 0x01, 0x00, 0x0F, 0xF2, 0x02, 0xFD,
    0x48, 0x6C, 0x74, 0x3B, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82,
];

/// pincer's user line with an image (`protocol::user_message`) reaches the
/// Messages API as an image block beside the text, bytes and type as sent.
#[tokio::test]
async fn an_image_block_in_a_user_line_reaches_the_api_as_sent() {
    use base64::Engine as _;
    let api = FakeApi::start(fake_api::echo()).await;
    let mut cli = Cli::spawn(&api, &["--replay-user-messages"]).await;

    let image = pincer::domain::media::ModelImage { media_type: "image/png".into(), data: TINY_PNG.to_vec() };
    let line = pincer::claude::protocol::user_message("what is in IMG1?", &[image], "u-img-1");
    cli.send(serde_json::from_str(&line).unwrap()).await;
    let lines = cli.until_results(1).await;
    assert_eq!(results(&lines)[0]["subtype"], "success", "{:?}", results(&lines));
    // Replayed with its uuid like a text line: pincer counts it taken the same way.
    let replay = lines.iter().find(|l| l["type"] == "user" && l["uuid"] == "u-img-1");
    assert!(replay.is_some(), "no replay of the image line: {lines:?}");

    let main = api.main_requests();
    let last_user = main[0].messages().iter().rev().find(|m| m["role"] == "user").expect("a user message");
    let blocks = last_user["content"].as_array().expect("content blocks");
    let images: Vec<&Value> = blocks.iter().filter(|b| b["type"] == "image").collect();
    assert_eq!(images.len(), 1, "{blocks:?}");
    assert_eq!(images[0]["source"]["type"], "base64");
    assert_eq!(images[0]["source"]["media_type"], "image/png");
    let data = images[0]["source"]["data"].as_str().unwrap();
    assert_eq!(base64::engine::general_purpose::STANDARD.decode(data).unwrap(), TINY_PNG, "the bytes as sent");
    assert!(blocks.iter().any(|b| b["type"] == "text" && b["text"].as_str().unwrap_or("").contains("IMG1")));
    assert!(cli.close().await.success());
}
