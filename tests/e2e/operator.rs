//! The operator's endpoint through the `pincer` binary (its counters are
//! the process's own, so no other test's turns are counted): `/metrics`
//! after a scripted turn and during a Bot API outage, checked by
//! Prometheus's own `promtool`; `/readyz` following the Bot API; the token.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::fake_api::{self, FakeApi};
use crate::support::fake_bot::{ChatKind, FakeBot, TgChat, TgUser};
use crate::support::harness::{any_port, pincer_command, spawn_pincer_run, spawn_pincer_serving, Sandbox, PATIENCE};

fn team() -> TgChat {
    TgChat { id: -100_300, kind: ChatKind::Supergroup { forum: false }, title: "Team".into() }
}

fn alice() -> TgUser {
    TgUser { id: 42, first_name: "Alice".into(), username: Some("alice".into()) }
}

async fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let client = reqwest::Client::new();
    let mut request = client.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("the endpoint answers");
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Polls `url` until `done` holds for its answer.
async fn until(url: &str, what: &str, done: impl Fn(u16, &str) -> bool) -> String {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let (status, body) = get(url, None).await;
            if done(status, &body) {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never: {what}"))
}

/// The value of the sample `name{labels}` in a scrape (None when absent).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `promtool check metrics`, Prometheus's own linter, reading the scrape.
async fn promtool_accepts(text: &str) {
    use tokio::io::AsyncWriteExt;
    #[allow(clippy::disallowed_methods)] // Prometheus's checker, not an agent
    let mut child = tokio::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool runs (Debian's `prometheus` package; .ci/run installs it)");
    child.stdin.take().unwrap().write_all(text.as_bytes()).await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool refused the scrape: {said}\n{text}");
}

#[tokio::test]
async fn metrics_count_a_turn_and_an_outage_and_readyz_follows_the_bot_api() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.fast_retries();
    sandbox.serve_telegram_group(&bot, "team", team().id).await;
    sandbox.config.http.listen = Some(any_port());
    sandbox.config.budget.daily_turns = Some(100);
    let config = sandbox.write_config();
    let (child, at) = spawn_pincer_serving(sandbox.root(), &["--config".as_ref(), config.as_os_str()], &[], None).await;
    let (metrics, readyz) = (format!("http://{at}/metrics"), format!("http://{at}/readyz"));

    until(&readyz, "ready once Telegram is connected", |status, _| status == 200).await;
    bot.say(&team(), &alice(), "hello METRICS");
    // The reply itself: under load a slow first turn posts a status message first.
    let reply = |bot: &FakeBot| bot.sent(team().id).iter().any(|s| s.text.starts_with("ECHO:"));
    bot.wait_for("the reply", reply).await;
    // The reply's row is marked delivered just after the Bot API answered.
    let text = until(&metrics, "the turn counted and its reply delivered", |_, body| {
        sample(body, "pincer_turns_total{group=\"team\",outcome=\"ok\"}") == Some(1.0)
            && sample(body, "pincer_outbox_backlog{platform=\"telegram\"}") == Some(0.0)
    })
    .await;
    assert_eq!(sample(&text, "pincer_messages_in_total{platform=\"telegram\"}"), Some(1.0), "{text}");
    assert!(sample(&text, "pincer_turn_cost_usd_total{group=\"team\"}").is_some_and(|c| c > 0.0), "{text}");
    assert_eq!(sample(&text, "pincer_turn_seconds_count{group=\"team\"}"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "pincer_live_sessions"), Some(1.0), "{text}");
    let launches = text.lines().filter(|l| l.starts_with("pincer_sandbox_launches_total{confinement=")).count();
    assert_eq!(launches, 1, "one CLI start, in its confinement: {text}");
    assert!(sample(&text, "pincer_tokens_total{group=\"team\",kind=\"output\"}").is_some_and(|t| t > 0.0), "{text}");
    let used = sample(&text, "pincer_budget_used_ratio{group=\"team\",part=\"day_turns\"}");
    assert_eq!(used, Some(0.01), "one turn of 100: {text}");
    assert!(!text.contains("hello METRICS"), "no message text in the metrics");
    promtool_accepts(&text).await;
    status_page_in_chromium(&format!("http://{at}/")).await;

    // Sends fail: the reply waits in the outbox, and the failures are counted.
    bot.outage(&["sendMessage"], 502, Duration::from_secs(60));
    bot.say(&team(), &alice(), "during the OUTAGE");
    let text = until(&metrics, "a reply waiting", |_, body| {
        sample(body, "pincer_outbox_backlog{platform=\"telegram\"}") == Some(1.0)
            && sample(body, "pincer_delivery_failures_total{platform=\"telegram\",kind=\"transient\"}").is_some()
    })
    .await;
    promtool_accepts(&text).await;
    // Receiving fails too: not ready, saying why.
    bot.outage(&["getUpdates"], 502, Duration::from_secs(60));
    let body = until(&readyz, "unready", |status, _| status == 503).await;
    assert!(body.contains("telegram is failing"), "{body}");
    bot.end_faults();
    until(&readyz, "ready again", |status, _| status == 200).await;
    until(&metrics, "the backlog drained", |_, body| {
        sample(body, "pincer_outbox_backlog{platform=\"telegram\"}") == Some(0.0)
    })
    .await;

    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGTERM).unwrap();
}

/// Loads the status page in headless Chromium (Debian's package; .ci/run
/// installs it) as a phone would: its text as rendered, and a screenshot
/// kept in `target/test-artifacts/status-page.png`.
async fn status_page_in_chromium(url: &str) {
    let chromium = |args: Vec<String>| async move {
        #[allow(clippy::disallowed_methods)] // a browser loading the page, not an agent
        let out = tokio::process::Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--window-size=412,915"])
            .args(args)
            .output()
            .await
            .expect("chromium runs (Debian's `chromium` package; .ci/run installs it)");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dom = chromium(vec!["--dump-dom".into(), url.into()]).await;
    assert!(dom.contains("daemon: running"), "{dom}");
    assert!(dom.contains("telegram: connected"), "{dom}");
    assert!(dom.contains("team: live, idle") && dom.contains("this month"), "{dom}");
    assert!(!dom.contains("hello METRICS"), "no message text on the page");
    let artifacts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    chromium(vec![format!("--screenshot={}", shot.display()), url.into()]).await;
    let png = std::fs::read(&shot).expect("a screenshot was written");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 2_000, "{} bytes", png.len());
}

#[tokio::test]
async fn beyond_loopback_the_endpoint_wants_a_token_and_healthz_does_not() {
    let api = FakeApi::start(fake_api::echo()).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.http.listen = Some("0.0.0.0:0".parse().unwrap());
    let config = sandbox.write_config();
    #[allow(clippy::disallowed_methods)] // the pincer binary under test
    let refused = tokio::process::Command::new(env!("CARGO_BIN_EXE_pincer"))
        .env_remove(crate::support::cli::CLAUDE_BIN_ENV)
        .args(["--config".as_ref(), config.as_os_str(), "run".as_ref()])
        .current_dir(sandbox.root())
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("http.token must be set"), "{said}");

    let token = "a-long-random-token-for-tests";
    sandbox.config.http.token = Some(pincer::config::Secret::new(token));
    let config = sandbox.write_config();
    let (child, at) = spawn_pincer_serving(sandbox.root(), &["--config".as_ref(), config.as_os_str()], &[], None).await;
    // Reached over loopback only, as every test's traffic.
    let base = format!("http://127.0.0.1:{}", at.port());
    assert_eq!(get(&format!("{base}/healthz"), None).await.0, 200);
    assert_eq!(get(&format!("{base}/metrics"), None).await.0, 401);
    assert_eq!(get(&format!("{base}/metrics"), Some("wrong-token-of-some-length")).await.0, 401);
    let (status, text) = get(&format!("{base}/metrics"), Some(token)).await;
    assert!(status == 200 && text.contains("pincer_live_sessions 0"), "{status} {text}");
    assert_eq!(get(&format!("{base}/readyz"), Some(token)).await.0, 200, "no platform to wait for");
    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGTERM).unwrap();
}

/// `pincer [--config F] status [args]` of the binary under test.
async fn status(sandbox: &Sandbox, config: &std::path::Path, args: &[&str]) -> String {
    let out = pincer_command(sandbox.root(), config, &[&["status"], args].concat()).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn pincer_status_shows_the_daemon_the_platform_and_what_a_group_spent() {
    let api = FakeApi::start(fake_api::echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.serve_telegram_group(&bot, "team", team().id).await;
    let config = sandbox.write_config();
    let text = status(&sandbox, &config, &[]).await;
    assert!(text.starts_with("daemon: not running"), "{text}");

    let child = spawn_pincer_run(sandbox.root(), &["--config".as_ref(), config.as_os_str()], &[]).await;
    bot.say(&team(), &alice(), "hello STATUS");
    // The reply itself: under load a slow first turn posts a status message first.
    let reply = |bot: &FakeBot| bot.sent(team().id).iter().any(|s| s.text.starts_with("ECHO:"));
    bot.wait_for("the reply", reply).await;
    let text = status(&sandbox, &config, &[]).await;
    assert!(text.starts_with(&format!("daemon: running (pid {})", child.id().unwrap())), "{text}");
    assert!(text.contains("telegram: connected"), "{text}");
    assert!(text.contains("  team: live, idle; $0.00 today"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&status(&sandbox, &config, &["--json"]).await).unwrap();
    assert_eq!(json["daemon"]["groups"][0]["name"], "team", "{json}");
    assert!(json["store"]["groups"][0]["cost_month_usd"].as_f64().is_some_and(|c| c > 0.0), "{json}");
    assert!(json["store"]["db_bytes"].as_u64().is_some_and(|b| b > 0), "{json}");
    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGTERM).unwrap();
}
