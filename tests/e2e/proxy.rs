//! The credential proxy forwards only what the CLI needs. The real CLI in
//! group `alpha`'s bubblewrap sandbox runs `curl` against the proxy's socket
//! with its own placeholder key for endpoints the CLI never calls: each gets
//! a 403 and the fake Messages API never sees it, while the CLI's own calls
//! (a turn, a background task and its follow-up, a subagent) all go through.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pincer::config::Secret;
use serde_json::json;

use crate::sandbox::{probe, require_bwrap};
use crate::support::cli::TEST_API_KEY;
use crate::support::fake_api::{self, ApiRequest, FakeApi, Reply, TASK_NOTIFICATION};
use crate::support::harness::{Running, Sandbox, PATIENCE};

/// Endpoints of the API an agent could misuse with the real key.
const FORBIDDEN: &[(&str, &str)] = &[
    ("GET", "/v1/files"),
    ("GET", "/v1/models"),
    ("POST", "/v1/messages/batches"),
    ("GET", "/v1/organizations/me/api_keys"),
    ("GET", "/api/oauth/profile"),
    ("POST", "/v1/messages/../files"),
];

/// One `curl` per forbidden endpoint, with the sandbox's placeholder key;
/// each prints `METHOD PATH status=CODE` and the body.
fn curl_forbidden() -> String {
    FORBIDDEN
        .iter()
        .map(|(method, path)| {
            format!(
                "echo; echo -n '{method} {path} '; curl -sS -m 20 --path-as-is -X {method} --unix-socket \
                 \"$ANTHROPIC_UNIX_SOCKET\" -H \"x-api-key: $ANTHROPIC_API_KEY\" -H 'content-type: application/json' \
                 -d '{{}}' -w ' status=%{{http_code}}' http://localhost{path} 2>&1"
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `PROBE_API` runs the curls, `BGBASH` a background task, `RUN_SUBAGENT` a
/// subagent (the tool is `Agent` on 2.1.330, `Task` on older CLIs: whichever
/// the request offers); the rest is echoed.
fn script() -> fake_api::Script {
    let rules = fake_api::scripted(vec![
        ("PROBE_API", Reply::bash(&curl_forbidden(), "probe the API")),
        ("BGBASH", Reply::bash_background("sleep 1; echo done-bg", "bg sleep")),
        (TASK_NOTIFICATION, Reply::text("FOLLOWUP: saw task notification")),
    ]);
    Arc::new(move |req: &ApiRequest| {
        if !req.is_subagent() && req.last_user_text().contains("RUN_SUBAGENT") {
            let offers =
                |name: &str| req.body()["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == name));
            let tool = if offers("Agent") { "Agent" } else { "Task" };
            let input = json!({"description": "greet", "prompt": "say hello", "subagent_type": "general-purpose"});
            return Reply::tool_use(tool, input);
        }
        rules(req)
    })
}

async fn forbidden_calls_are_refused_and_the_clis_own_pass(api: &FakeApi, pincer: &Running, alpha: &str) {
    let alpha = alpha.parse().unwrap();
    pincer.send(&alpha, "hello").await;
    assert_eq!(pincer.next_outbound().await.text, "ECHO: hello");

    let out = probe(pincer, &alpha, "PROBE_API").await;
    for (method, path) in FORBIDDEN {
        let said = format!("{method} {path} {{");
        let line = out.lines().find(|l| l.contains(&said)).unwrap_or_else(|| panic!("{said} in {out}"));
        assert!(line.ends_with("status=403"), "{method} {path} is refused: {line}");
        assert!(line.contains("\"permission_error\"") && line.contains("credential proxy refused"), "{line}");
    }

    pincer.send(&alpha, "please BGBASH").await;
    assert!(pincer.next_outbound().await.text.starts_with("AFTER_TOOL: TOOL_RESULT(err=False):Command running"));
    assert_eq!(pincer.next_outbound().await.text, "FOLLOWUP: saw task notification");

    pincer.send(&alpha, "please RUN_SUBAGENT").await;
    assert!(pincer.next_outbound().await.text.starts_with("AFTER_TOOL: "), "the subagent's turn ended");
    let deadline = Instant::now() + PATIENCE;
    while !api.requests().iter().any(|r| r.is_subagent()) {
        assert!(Instant::now() < deadline, "the subagent's request reached the API");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Only the CLI's Messages calls came through: nothing else reached the API.
    let others: Vec<String> =
        api.other_requests().into_iter().filter(|r| !r.starts_with("POST /v1/messages/count_tokens")).collect();
    assert!(others.is_empty(), "the API saw only Messages calls: {others:?}");
}

#[tokio::test]
async fn the_agent_reaches_only_the_messages_api_through_the_credential_proxy() {
    require_bwrap().await;
    let api = FakeApi::start(script()).await;
    let sandbox = Sandbox::new(&api);
    sandbox.add_group("alpha", Some(&["Bash", "Agent", "Task"])).await;
    let pincer = sandbox.start().await;
    forbidden_calls_are_refused_and_the_clis_own_pass(&api, &pincer, "alpha").await;
    assert!(api.requests().iter().all(|r| r.credential() == Some(TEST_API_KEY)));
    pincer.stop().await;
}

#[tokio::test]
async fn with_an_oauth_token_the_same_calls_pass_and_the_same_are_refused() {
    require_bwrap().await;
    let api = FakeApi::start(script()).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.anthropic.api_key = None;
    sandbox.config.anthropic.oauth_token = Some(Secret::new("oauth-test-token"));
    sandbox.add_group("alpha", Some(&["Bash", "Agent", "Task"])).await;
    let pincer = sandbox.start().await;
    forbidden_calls_are_refused_and_the_clis_own_pass(&api, &pincer, "alpha").await;
    assert!(api.requests().iter().all(|r| r.credential() == Some("Bearer oauth-test-token")));
    pincer.stop().await;
}
