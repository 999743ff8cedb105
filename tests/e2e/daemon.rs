//! `pincer run` starts, opens the store, and stops cleanly on SIGTERM and SIGINT.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::cli::claude_bin;
use crate::support::harness::{spawn_pincer_run, PATIENCE};

async fn run_and_signal(signal: Signal) {
    let dir = tempfile::tempdir().unwrap();
    let cli = claude_bin();
    let mut child = spawn_pincer_run(dir.path(), &[], &[("PINCER_CLAUDE__COMMAND", cli.as_os_str())]).await;
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

#[tokio::test]
async fn a_second_pincer_on_the_same_data_refuses_at_once_naming_the_first() {
    use crate::support::fake_api::{self, FakeApi};
    use crate::support::fake_bot::FakeBot;
    use crate::support::harness::Sandbox;

    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.use_telegram(&bot);
    sandbox.add_group("main", None).await;
    let first = sandbox.spawn_daemon();
    // The lock is taken before Telegram is asked anything.
    bot.wait_for("the first pincer to serve Telegram", |bot| !bot.calls_to("getMe").is_empty()).await;

    let second = tokio::time::timeout(PATIENCE, pincer::app::run(sandbox.config.clone(), Default::default()))
        .await
        .expect("a second run refuses at once");
    let text = format!("{:#}", second.expect_err("a second pincer refuses to start"));
    assert!(text.contains(&format!("pid {}", std::process::id())), "{text}");
    assert!(text.contains(&sandbox.config.data_dir.display().to_string()), "{text}");
    first.stop().await;

    // Released when the first stops.
    let again = sandbox.spawn_daemon();
    again.stop().await;
}

#[tokio::test]
async fn a_daemon_that_fails_once_its_engine_runs_stops_the_sessions_before_it_returns() {
    use pincer::config::Secret;
    use pincer::domain::{Inbound, Platform, Source};
    use pincer::store::InboundState;
    use tokio_util::sync::CancellationToken;

    use crate::support::fake_api::{self, FakeApi};
    use crate::support::harness::Sandbox;

    let api = FakeApi::start(fake_api::echo()).await;
    let mut sandbox = Sandbox::new(&api);
    let group = sandbox.add_group("left", None).await;
    // Unanswered before a restart: the start sends it again, to a session.
    let store = sandbox.store().await;
    let msg = Inbound::new(group.clone(), Source::Chat(Platform::Telegram), "ana", "hello?");
    store.queue().insert_inbound(&msg, InboundState::Sent).await.unwrap();
    store.close().await;
    // Read only once the engine runs, when Telegram is set up.
    sandbox.config.telegram.token = Some(Secret::new("123456:TEST-TOKEN"));
    sandbox.config.telegram.api_url = Some("not a url".into());

    let shutdown = CancellationToken::new();
    let ended = tokio::time::timeout(PATIENCE, pincer::app::run(sandbox.config.clone(), shutdown.clone()))
        .await
        .expect("pincer gives up at once");
    let text = format!("{:#}", ended.expect_err("a setting that can never work stops pincer"));
    assert!(text.contains("api_url"), "{text}");
    // Told to stop, and waited for: `run` returns only once every session
    // has ended (here the error usually comes before a CLI was started).
    assert!(shutdown.is_cancelled(), "the sessions were told to stop before pincer returned");
    let store = sandbox.store().await;
    let events: Vec<String> =
        store.journal().session_events(&group).await.unwrap().into_iter().map(|(kind, _)| kind).collect();
    assert!(events.is_empty() || events.last().is_some_and(|e| e == "shutdown"), "{events:?}");
    store.close().await;
}

/// Under systemd (`Type=notify`): READY once pincer serves, watchdog pings
/// at half `WATCHDOG_USEC` while it runs, STOPPING at SIGTERM; read from a
/// notify socket the test listens on, as systemd would.
#[tokio::test]
async fn under_systemd_pincer_says_ready_pings_the_watchdog_and_says_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = tokio::net::UnixDatagram::bind(&socket_path).unwrap();
    let cli = claude_bin();
    let env = [
        ("PINCER_CLAUDE__COMMAND", cli.as_os_str()),
        ("NOTIFY_SOCKET", socket_path.as_os_str()),
        ("WATCHDOG_USEC", std::ffi::OsStr::new("400000")),
    ];
    let mut child = spawn_pincer_run(dir.path(), &[], &env).await;
    let mut heard: Vec<String> = Vec::new();
    let mut buf = vec![0u8; 4096];
    let mut next = async |heard: &mut Vec<String>| {
        let n = tokio::time::timeout(PATIENCE, socket.recv(&mut buf)).await.expect("a notification").unwrap();
        heard.extend(String::from_utf8_lossy(&buf[..n]).lines().map(str::to_owned));
    };
    while heard.iter().filter(|l| *l == "WATCHDOG=1").count() < 2 {
        next(&mut heard).await;
    }
    assert_eq!(heard.first().map(String::as_str), Some("READY=1"), "ready before any ping: {heard:?}");

    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGTERM).unwrap();
    while !heard.iter().any(|l| l == "STOPPING=1") {
        next(&mut heard).await;
    }
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("pincer stops").unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn the_service_unit_passes_systemd_analyze_where_it_is_installed() {
    let dir = tempfile::tempdir().unwrap();
    #[allow(clippy::disallowed_methods)] // runs the pincer binary under test
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pincer"))
        .env_remove(crate::support::cli::CLAUDE_BIN_ENV)
        .args(["service", "print", "--user", "root"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let unit = String::from_utf8(out.stdout).unwrap();
    assert!(unit.contains(&format!("ExecStart={} run", env!("CARGO_BIN_EXE_pincer"))), "{unit}");
    let file = dir.path().join("pincer.service");
    std::fs::write(&file, &unit).unwrap();
    // The data and groups dirs must exist for ReadWritePaths, as after `pincer setup`.
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::create_dir_all(dir.path().join("groups")).unwrap();
    #[allow(clippy::disallowed_methods)] // systemd's own checker, not an agent
    let verify = std::process::Command::new("systemd-analyze").arg("verify").arg(&file).output();
    let Ok(verify) = verify else {
        eprintln!("systemd-analyze is not installed here: only the unit's text was checked");
        return;
    };
    let said = format!("{}{}", String::from_utf8_lossy(&verify.stdout), String::from_utf8_lossy(&verify.stderr));
    assert!(verify.status.success() && !said.contains("pincer.service:"), "{said}");
}

/// `[log] format = "json"`: one JSON object per line, for a log collector.
#[tokio::test]
async fn with_log_format_json_every_log_line_is_a_json_object() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("pincer.log");
    let cli = claude_bin();
    let env = [("PINCER_CLAUDE__COMMAND", cli.as_os_str()), ("PINCER_LOG__FORMAT", std::ffi::OsStr::new("json"))];
    let mut child = crate::support::harness::spawn_pincer_run_logging(dir.path(), &[], &env, Some(&log)).await;
    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGTERM).unwrap();
    tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("pincer stops").unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let running =
        lines.iter().find(|l| l["fields"]["message"].as_str().is_some_and(|m| m.contains("pincer is running")));
    let running = running.unwrap_or_else(|| panic!("{text}"));
    assert_eq!(running["level"], "INFO", "{running}");
    assert!(running["timestamp"].is_string(), "{running}");
}
