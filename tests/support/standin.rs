//! A stand-in for the Claude Code CLI that answers at once, for the load bench
//! (`benches/load.rs`): the bench binary runs it when pincer starts it with
//! [`ENV`] set (`claude.command` = the bench itself, `claude.env` sets the
//! variable), so no other build target or interpreter is needed.
//!
//! It speaks as much of the stream-json protocol as pincer relies on (see
//! `../shared/protocol/README.md`): for every user line it prints a
//! `system/init` with the session id, the replay of that line with its uuid
//! (`--replay-user-messages`), and one `result` whose text names the load
//! tokens ([`tokens`]) the message carried, so the chat side can tell which
//! message each reply answers. `--resume=<id>` keeps the session id; a control
//! request gets a success answer; a line that is not JSON ends it with exit
//! code 1, as it ends the real CLI; end of input ends it with 0. With
//! [`DELAY_ENV`] set to a number of milliseconds it waits that long before
//! each `result`, like a model thinking, so a bench can make live slots (not
//! CPU) bound pincer's throughput. It never touches the network or the disk. `--version` (which pincer asks without
//! `claude.env`) is answered by the bench's `main` before anything else.
#![allow(dead_code)]

use std::io::{BufRead, BufWriter, Write};

use serde_json::{json, Value};

/// Set in the stand-in's environment: the bench binary acts as the CLI.
pub const ENV: &str = "LOAD_BENCH_STANDIN";

/// Set to whole milliseconds: how long the stand-in takes per answer (0: none).
pub const DELAY_ENV: &str = "LOAD_BENCH_STANDIN_DELAY_MS";

/// What `--version` prints: the CLI version pincer is tested with.
pub const VERSION: &str = "2.1.330 (Claude Code)";

/// How a load message names itself: `msg-<group>-<n>`.
const TOKEN_PREFIX: &str = "msg-";

/// The token of message `n` (from 1) of group `group` (from 0).
pub fn token(group: usize, n: usize) -> String {
    format!("{TOKEN_PREFIX}{group}-{n}")
}

/// Every `msg-<digits>-<digits>` in `text`, in order.
pub fn tokens(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(TOKEN_PREFIX).map(|i| from + i) {
        let rest = &text[at + TOKEN_PREFIX.len()..];
        let group = rest.bytes().take_while(u8::is_ascii_digit).count();
        let after_group = &rest[group..];
        let n = match after_group.strip_prefix('-') {
            Some(tail) => tail.bytes().take_while(u8::is_ascii_digit).count(),
            None => 0,
        };
        let end = at + TOKEN_PREFIX.len() + group + 1 + n;
        if group > 0 && n > 0 {
            found.push(&text[at..end]);
            from = end;
        } else {
            from = at + TOKEN_PREFIX.len();
        }
    }
    found
}

/// The reply to a message that carried `named`.
pub fn answer_text(named: &[&str]) -> String {
    format!("answered {}", named.join(" "))
}

/// Runs the stand-in on this process's stdin and stdout, then exits.
pub fn run() -> ! {
    let session_id = std::env::args()
        .find_map(|a| a.strip_prefix("--resume=").map(str::to_owned))
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let stdin = std::io::stdin().lock();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut cost = 0.0;
    let delay = std::env::var(DELAY_ENV).ok().and_then(|v| v.parse().ok()).map(std::time::Duration::from_millis);
    for line in stdin.lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let Ok(frame) = serde_json::from_str::<Value>(&line) else {
            // The real CLI dies on a line that is not JSON: so does this one.
            std::process::exit(1);
        };
        let written = match frame.get("type").and_then(Value::as_str) {
            Some("user") => {
                if let Some(delay) = delay {
                    std::thread::sleep(delay);
                }
                answer(&mut out, &frame, &session_id, &mut cost)
            }
            Some("control_request") => {
                let id = frame.get("request_id").cloned().unwrap_or(Value::Null);
                let reply = json!({
                    "type": "control_response",
                    "response": {"subtype": "success", "request_id": id, "response": {}},
                });
                writeln!(out, "{reply}")
            }
            _ => Ok(()),
        };
        // pincer has gone (stdout closed): nothing left to answer.
        if written.and_then(|()| out.flush()).is_err() {
            std::process::exit(0);
        }
    }
    std::process::exit(0);
}

/// One turn: `init`, the replay, the `result`.
fn answer(out: &mut impl Write, frame: &Value, session_id: &str, cost: &mut f64) -> std::io::Result<()> {
    let message = frame.get("message").cloned().unwrap_or(Value::Null);
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let uuid = frame.get("uuid").cloned().unwrap_or(Value::Null);
    *cost += 0.0001;
    let init = json!({"type": "system", "subtype": "init", "session_id": session_id, "model": "load-standin"});
    let replay = json!({
        "type": "user",
        "message": message,
        "parent_tool_use_id": null,
        "session_id": session_id,
        "uuid": uuid,
    });
    let result = json!({
        "type": "result",
        "subtype": "success",
        "is_error": false,
        "result": answer_text(&tokens(&text)),
        "session_id": session_id,
        "num_turns": 1,
        "duration_ms": 0,
        "total_cost_usd": *cost,
    });
    writeln!(out, "{init}")?;
    writeln!(out, "{replay}")?;
    writeln!(out, "{result}")
}
