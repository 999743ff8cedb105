//! The CLI's built-ins that start a process or schedule work and that no test
//! traces are withheld: the model is not offered them, and a call to one is
//! refused by the CLI. Runs on the CLI under test (`PINCER_TEST_CLAUDE`).

use pincer::config::SandboxMode;

use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::harness::Sandbox;

const WITHHELD: [&str; 5] = ["Monitor", "Workflow", "ScheduleWakeup", "EnterWorktree", "ExitWorktree"];

/// What the message asking for each says: not the tool's name alone, since
/// the CLI's refusal names the tool and would match the rule again.
const ASK: [&str; 5] = ["use-Monitor", "use-Workflow", "use-ScheduleWakeup", "use-EnterWorktree", "use-ExitWorktree"];

#[tokio::test]
async fn untraced_builtins_are_not_offered_and_a_call_is_refused() {
    let script = ASK.iter().zip(WITHHELD).map(|(ask, t)| (*ask, Reply::tool_use(t, serde_json::json!({})))).collect();
    let api = FakeApi::start(fake_api::scripted(script)).await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.config.sandbox.mode = SandboxMode::None;
    let group = sandbox.add_group("g", None).await;
    let pincer = sandbox.start().await;
    for (tool, ask) in WITHHELD.into_iter().zip(ASK) {
        pincer.send(&group, ask).await;
        let reply = pincer.next_outbound().await;
        assert!(reply.text.starts_with("AFTER_TOOL"), "{tool}: the turn went on after the refusal: {reply:?}");
        let refusal = api.main_requests().pop().unwrap().body()["messages"].to_string();
        assert!(refusal.contains(&format!("No such tool available: {tool}")), "{tool}: {refusal}");
        let offered = api.main_requests().pop().unwrap().body()["tools"].to_string();
        assert!(!offered.contains(&format!("\"name\":\"{tool}\"")), "{tool} is offered");
    }
    pincer.stop().await;
}
