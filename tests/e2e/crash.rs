//! Bad input never takes pincer down: a stand-in CLI prints garbage and an
//! oversized line, then dies mid-turn; pincer restarts it with `--resume` and
//! the message is still answered.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use pincer::domain::OutboundKind;

use crate::support::harness::{Sandbox, PATIENCE};

/// A stand-in for `claude`: each run answers pincer's `initialize`; the first
/// then prints an `init`, garbage, an oversized line and exits mid-turn; later runs answer each message properly.
/// Every run appends its arguments to `argv.log`.
const STAND_IN: &str = r#"#!/usr/bin/env bash
dir="$(dirname "$0")"
echo "$*" >> "$dir/argv.log"
# pincer's `initialize` first: answered as the CLI does, or no message comes.
read -r init
id=$(printf '%s' "$init" | sed -n 's/.*"request_id":"\([^"]*\)".*/\1/p')
echo "{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"$id\",\"response\":{}}}"
if [ ! -e "$dir/crashed-once" ]; then
  touch "$dir/crashed-once"
  read -r _line
  echo '{"type":"system","subtype":"init","session_id":"sess-standin"}'
  echo 'this is not json'
  head -c 1100000 /dev/zero | tr '\0' 'x'; echo
  echo '{"no_type":true}'
  exit 3
fi
while read -r line; do
  uuid=$(printf '%s' "$line" | sed -n 's/.*"uuid":"\([^"]*\)".*/\1/p')
  echo '{"type":"system","subtype":"init","session_id":"sess-standin"}'
  echo "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"x\"},\"parent_tool_use_id\":null,\"uuid\":\"$uuid\"}"
  echo '{"type":"result","subtype":"success","is_error":false,"result":"recovered","session_id":"sess-standin"}'
done
"#;

fn install_stand_in(dir: &Path) -> std::path::PathBuf {
    install_script(dir, STAND_IN)
}

fn install_script(dir: &Path, script: &str) -> std::path::PathBuf {
    let path = dir.join("fake-claude");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn garbage_and_a_crash_mid_turn_lose_no_message() {
    let bin_dir = tempfile::tempdir().unwrap();
    let program = install_stand_in(bin_dir.path());
    let sandbox = Sandbox::with_program(program, "http://127.0.0.1:9");
    let group = sandbox.add_group("fragile", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "are you there?").await;
    let notice = pincer.next_outbound().await;
    assert_eq!(notice.kind, OutboundKind::Notice);
    assert!(notice.text.contains("restarting"), "{notice:?}");
    let reply = pincer.next_outbound().await;
    assert_eq!((reply.kind, reply.text.as_str()), (OutboundKind::Reply, "recovered"));

    assert_eq!(pincer.engine.metrics.skipped_lines(), 3, "garbage, oversized, untyped");
    assert_eq!(pincer.session_events(&group).await, ["started", "crashed", "resumed"]);
    let argv = std::fs::read_to_string(bin_dir.path().join("argv.log")).unwrap();
    let runs: Vec<_> = argv.lines().collect();
    assert_eq!(runs.len(), 2);
    assert!(!runs[0].contains("--resume"));
    assert!(runs[1].contains("--resume=sess-standin"), "{}", runs[1]);
    // The message is marked answered right after its result is stored.
    let answered = tokio::time::timeout(PATIENCE, async {
        loop {
            let history = pincer.store().history().history(&group, 10).await.unwrap();
            if matches!(&history[0], pincer::store::HistoryEntry::Inbound { state, .. } if state == "answered") {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    answered.await.expect("the message is marked answered");
    pincer.stop().await;
}

#[tokio::test]
async fn a_missing_cli_is_a_clear_startup_error() {
    let sandbox = Sandbox::with_program("/nonexistent/claude".into(), "http://127.0.0.1:9");
    let err = pincer::app::Engine::start(sandbox.config.clone(), Default::default()).await.err().expect("start fails");
    let text = err.to_string();
    assert!(text.contains("claude.command") && text.contains("pincer setup"), "{text}");
}

/// A stand-in that asks pincer something it does not support and reports the
/// answer (after pincer's `initialize`, answered, and the message).
const ASKS_THE_UNKNOWN: &str = r#"#!/usr/bin/env bash
read -r init
id=$(printf '%s' "$init" | sed -n 's/.*"request_id":"\([^"]*\)".*/\1/p')
echo "{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"$id\",\"response\":{}}}"
read -r _message
echo '{"type":"control_request","request_id":"req-x","request":{"subtype":"mystery"}}'
read -r answer
answer=$(printf '%s' "$answer" | sed 's/"/'"'"'/g')
echo "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"$answer\",\"session_id\":\"s\"}"
cat > /dev/null
"#;

#[tokio::test]
async fn unknown_control_requests_get_an_error_answer() {
    let bin_dir = tempfile::tempdir().unwrap();
    let program = install_script(bin_dir.path(), ASKS_THE_UNKNOWN);
    let sandbox = Sandbox::with_program(program, "http://127.0.0.1:9");
    let group = sandbox.add_group("curious", None).await;
    let pincer = sandbox.start().await;

    pincer.send(&group, "hi").await;
    let reply = pincer.next_outbound().await.text;
    assert!(reply.contains("'subtype':'error'") && reply.contains("'request_id':'req-x'"), "{reply}");
    assert!(reply.contains("Unsupported control request subtype: mystery"), "{reply}");
    pincer.stop().await;
}
