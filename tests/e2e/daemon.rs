//! `pincer run` starts, opens the store, and stops cleanly on SIGTERM and SIGINT.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::cli::claude_bin;
use crate::support::harness::PATIENCE;

async fn run_and_signal(signal: Signal) {
    let dir = tempfile::tempdir().unwrap();
    #[allow(clippy::disallowed_methods)] // runs the pincer binary under test
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_pincer"))
        .arg("run")
        .current_dir(dir.path())
        .env("PINCER_CLAUDE__COMMAND", claude_bin())
        .env_remove(crate::support::cli::CLAUDE_BIN_ENV)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap()).lines();
    let ready = async {
        while let Some(line) = log.next_line().await.unwrap() {
            if line.contains("pincer is running") {
                return;
            }
        }
        panic!("pincer exited before it was running");
    };
    tokio::time::timeout(PATIENCE, ready).await.expect("pincer starts");
    assert!(dir.path().join("data/pincer.db").exists(), "the store was opened");

    kill(Pid::from_raw(child.id().unwrap() as i32), signal).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("pincer stops").unwrap();
    assert!(status.success(), "{signal:?} → {status}");
}

#[tokio::test]
async fn the_daemon_stops_cleanly_on_sigterm() {
    run_and_signal(Signal::SIGTERM).await;
}

#[tokio::test]
async fn the_daemon_stops_cleanly_on_sigint() {
    run_and_signal(Signal::SIGINT).await;
}
