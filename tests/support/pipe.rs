//! The raw CLI pipe the latency benches compare pincer with, and their
//! paired statistics: `claude -p --input-format stream-json ...` driven
//! directly, a user line in and lines read until its `result`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use super::cli::{claude_bin, stream_json_args, ENV_TO_REMOVE};
use super::fake_api::echo_of;
use super::harness::PATIENCE;

/// The long-lived pipe's flags, as pincer passes them (without its MCP tools).
pub fn pipe_args() -> Vec<String> {
    let mut args = stream_json_args();
    args.extend(["--permission-prompt-tool".to_owned(), "stdio".to_owned()]);
    args
}

/// The CLI's stream-json pipe, driven directly: what pincer wraps.
pub struct RawPipe {
    _dir: tempfile::TempDir,
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    /// The `result` text a line's answer carries ([`echo_of`] unless set).
    answer_for: fn(&str) -> String,
    /// Each line carries a `uuid` of its own ([`RawPipe::start_as_pincer`]).
    uuids: Option<u64>,
}

impl RawPipe {
    /// With `env` (its `HOME` becomes a folder of the pipe's own).
    pub fn start(env: Vec<(String, String)>) -> RawPipe {
        RawPipe::start_with(env, &[])
    }

    /// [`RawPipe::start`], its lines written the way pincer writes them:
    /// each with a `uuid` of its own, and `--replay-user-messages` (the CLI
    /// echoes a line as a turn takes it, and prints `command_lifecycle`
    /// frames for it).
    pub fn start_as_pincer(env: Vec<(String, String)>) -> RawPipe {
        let mut pipe = RawPipe::start_with(env, &["--replay-user-messages"]);
        pipe.uuids = Some(0);
        pipe
    }

    fn start_with(mut env: Vec<(String, String)>, extra_args: &[&str]) -> RawPipe {
        let (dir, home, cwd) = scratch();
        env.retain(|(k, _)| k != "HOME");
        env.push(("HOME".into(), home.display().to_string()));
        let mut cmd = offline_cli(&cwd, &env, Stdio::piped());
        cmd.args(pipe_args()).args(extra_args);
        RawPipe::spawn(dir, cmd)
    }

    /// Starts `cmd` (stdin and stdout piped); `dir` lives as long as the pipe.
    pub fn spawn(dir: tempfile::TempDir, mut cmd: Command) -> RawPipe {
        let mut child = cmd.spawn().expect("claude starts");
        let stdin = child.stdin.take().expect("stdin is piped");
        let lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
        RawPipe { _dir: dir, child, stdin, lines, answer_for: echo_of, uuids: None }
    }

    /// Expects `answer_for(text)` as the answer to `text` (a stand-in CLI's).
    pub fn answering(mut self, answer_for: fn(&str) -> String) -> RawPipe {
        self.answer_for = answer_for;
        self
    }

    /// One user line in, lines read until its `result`.
    pub async fn round_trip(&mut self, text: &str) -> Duration {
        let start = Instant::now();
        self.send(text).await;
        self.answer(text).await;
        start.elapsed()
    }

    /// Writes one user line.
    pub async fn send(&mut self, text: &str) {
        let mut line = serde_json::json!({"type": "user", "message": {"role": "user", "content": text}});
        if let Some(n) = self.uuids.as_mut() {
            *n += 1;
            line["uuid"] = format!("00000000-0000-4000-8000-{n:012}").into();
        }
        self.stdin.write_all(format!("{line}\n").as_bytes()).await.expect("the CLI reads its stdin");
        self.stdin.flush().await.unwrap();
    }

    /// Reads lines until the `result`, which must echo `text`; returns it.
    pub async fn answer(&mut self, text: &str) -> Value {
        let result = tokio::time::timeout(PATIENCE, async {
            while let Some(line) = self.lines.next_line().await.expect("the CLI's stdout") {
                if let Some(result) = result_frame(&line) {
                    return result;
                }
            }
            panic!("the CLI closed its stdout");
        })
        .await
        .expect("a result within the patience limit");
        assert_eq!(result["result"].as_str(), Some((self.answer_for)(text).as_str()), "{result}");
        result
    }

    pub async fn close(mut self) {
        drop(self.stdin);
        let _ = tokio::time::timeout(PATIENCE, self.child.wait()).await;
    }
}

/// `line` as a frame, if it is a `result`.
pub fn result_frame(line: &str) -> Option<Value> {
    serde_json::from_str::<Value>(line).ok().filter(|value| value["type"] == "result")
}

/// A raw CLI's own folder, and its `HOME` and working folder inside it.
pub fn scratch() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (home, cwd) = (dir.path().join("home"), dir.path().join("work"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    (dir, home, cwd)
}

/// The CLI in `cwd` with the tests' offline environment, stdout piped.
pub fn offline_cli(cwd: &Path, env: &[(String, String)], stdin: Stdio) -> Command {
    #[allow(clippy::disallowed_methods)] // the bench runs the CLI outside pincer on purpose
    let mut cmd = Command::new(claude_bin());
    cmd.current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for key in ENV_TO_REMOVE {
        cmd.env_remove(key);
    }
    cmd
}

/// Nearest-rank percentile (`p` in 0..=100) of unsorted samples.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    assert!(!samples.is_empty(), "no samples");
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `side[i] − raw[i]` in ms, sorted: each sample against the raw pipe's
/// same sample, sent right before or after it, so a busy moment cancels out.
pub fn paired_deltas_ms(side: &[Duration], raw: &[Duration]) -> Vec<f64> {
    let mut deltas: Vec<f64> = side.iter().zip(raw).map(|(s, r)| ms(*s) - ms(*r)).collect();
    deltas.sort_by(f64::total_cmp);
    deltas
}

/// The median of [`paired_deltas_ms`].
pub fn paired_median_ms(side: &[Duration], raw: &[Duration]) -> f64 {
    median_of_sorted(&paired_deltas_ms(side, raw))
}

/// The median of `sorted` (ascending, not empty): the middle one, or the
/// mean of the two middle ones.
pub fn median_of_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// Nearest-rank percentile of [`paired_deltas_ms`].
pub fn paired_percentile_ms(side: &[Duration], raw: &[Duration], p: f64) -> f64 {
    let deltas = paired_deltas_ms(side, raw);
    let rank = ((p / 100.0) * deltas.len() as f64).ceil() as usize;
    deltas[rank.clamp(1, deltas.len()) - 1]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
