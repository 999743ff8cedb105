//! Ready-made [`Script`]s: echo, delays, keyword rules, faults, the background-Bash one.

use super::*;

/// Replies `ECHO: <last_user_prompt>` to a plain message and `AFTER_TOOL:
/// <last_user_prompt>` when the turn carries tool results (so `hello MSG1` gives
/// `ECHO: hello MSG1`, and a Bash result `TOOL_RESULT(err=False):fg-done`).
pub fn echo() -> Script {
    Arc::new(echo_reply)
}

fn echo_reply(req: &ApiRequest) -> Reply {
    if req.has_tool_result() {
        Reply::Text(format!("AFTER_TOOL: {}", req.last_user_prompt()))
    } else {
        Reply::Text(echo_of(&req.last_user_prompt()))
    }
}

/// What [`echo`] answers to a plain message whose prompt is `text`.
pub fn echo_of(text: &str) -> String {
    format!("ECHO: {text}")
}

/// `script`, every reply held back by `delay` first: a model that takes
/// about that long to answer (the benches' ~25 ms).
pub fn delayed(delay: Duration, script: Script) -> Script {
    Arc::new(move |req: &ApiRequest| Reply::slow(delay, script(req)))
}

/// The first rule whose needle occurs in [`ApiRequest::last_user_text`] gives the
/// reply; otherwise [`echo`]. Tool results are text too, so a needle that a tool
/// prints matches the turn after the tool ran.
pub fn scripted(rules: Vec<(&'static str, Reply)>) -> Script {
    Arc::new(move |req: &ApiRequest| {
        let text = req.last_user_text();
        rules
            .iter()
            .find(|(needle, _)| text.contains(needle))
            .map_or_else(|| echo_reply(req), |(_, reply)| reply.clone())
    })
}

/// For a request whose last user text holds a rule's needle, the rule's
/// replies in order (its first request gets the first, a retry or resend of the
/// same message the next), then what `then` picks; other requests go to `then`.
pub fn faults(rules: Vec<(&'static str, Vec<Reply>)>, then: Script) -> Script {
    let used = Mutex::new(vec![0usize; rules.len()]);
    Arc::new(move |req: &ApiRequest| {
        let text = req.last_user_text();
        let Some(i) = rules.iter().position(|(needle, _)| text.contains(needle)) else {
            return then(req);
        };
        let n = {
            let mut used = used.lock().unwrap();
            used[i] += 1;
            used[i] - 1
        };
        rules[i].1.get(n).cloned().unwrap_or_else(|| then(req))
    })
}

/// An `ANTHROPIC_AUTH_TOKEN` that makes the CLI take `ANTHROPIC_BASE_URL` for a
/// Claude gateway (an unsigned JWT with `aud: "claude-gateway"`; the CLI reads
/// the audience and checks no signature). Only then does 2.1.330 report a 429
/// with the unified rate-limit headers as `usage_limit_reached` with its reset;
/// with a plain API key it is a 429 like any other.
pub const GATEWAY_TOKEN: &str = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.\
    eyJhdWQiOiJjbGF1ZGUtZ2F0ZXdheSIsImlhdCI6MTc2NzIyNTYwMCwiZXhwIjo0MTAyNDQ0ODAwfQ.fake-signature";

/// `BGBASH` starts `sleep 2; echo done-bg` in the background; the follow-up turn the
/// CLI starts when it ends is answered `FOLLOWUP: saw task notification`; the rest
/// is [`echo`].
pub fn bg_bash() -> Script {
    scripted(vec![
        ("BGBASH", Reply::bash_background("sleep 2; echo done-bg", "bg sleep")),
        (TASK_NOTIFICATION, Reply::text("FOLLOWUP: saw task notification")),
    ])
}
