//! Parsing checked against every recorded transcript of the real CLI
//! (copied from the shared protocol notes into `tests/data/`).

use std::fs;
use std::path::PathBuf;

use super::*;

fn transcript_dirs() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut dirs: Vec<_> = fs::read_dir(&root)
        .expect("tests/data exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("transcripts"))
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 2, "both transcript sets are present");
    dirs
}

fn events(dir: &str, name: &str) -> Vec<CliEvent> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(dir).join(name);
    fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| parse_line(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
        .collect()
}

#[test]
fn every_recorded_stdout_line_parses() {
    let mut lines = 0;
    for dir in transcript_dirs() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if !path.to_string_lossy().ends_with(".stdout.jsonl") {
                continue;
            }
            for line in fs::read_to_string(&path).unwrap().lines() {
                parse_line(line).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                lines += 1;
            }
        }
    }
    assert!(lines > 300, "expected the whole corpus, parsed {lines} lines");
}

#[test]
fn background_bash_gives_task_frames_and_a_follow_up_result() {
    for (dir, file) in
        [("transcripts-2.1.197", "02a-bg-bash-stdin-open.stdout.jsonl"), ("transcripts-2.1.330", "02a.stdout.jsonl")]
    {
        let evs = events(dir, file);
        let results: Vec<_> = evs
            .iter()
            .filter_map(|e| if let CliEvent::Result { result: r, .. } = e { Some(r) } else { None })
            .collect();
        assert_eq!(results.len(), 2, "{dir}");
        assert_eq!(results[1].origin.as_deref(), Some("task-notification"), "{dir}");
        let subtypes: Vec<_> = evs
            .iter()
            .filter_map(|e| if let CliEvent::System { frame: t, .. } = e { Some(t.subtype.as_str()) } else { None })
            .collect();
        assert!(subtypes.contains(&"task_started"), "{dir}: {subtypes:?}");
        assert!(subtypes.contains(&"task_notification"), "{dir}: {subtypes:?}");
        let updated = evs.iter().find_map(|e| match e {
            CliEvent::System { frame: t, .. } if t.subtype == "task_updated" => Some(t.status.clone()),
            _ => None,
        });
        assert_eq!(updated, Some(Some("completed".to_owned())), "{dir}: status comes from the patch");
    }
}

#[test]
fn every_recorded_task_frame_becomes_a_typed_task_event() {
    let mut seen = std::collections::BTreeSet::new();
    for dir in transcript_dirs() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if !path.to_string_lossy().ends_with(".stdout.jsonl") {
                continue;
            }
            for line in fs::read_to_string(&path).unwrap().lines().filter(|l| !l.trim().is_empty()) {
                let Ok(CliEvent::System { frame, task }) = parse_line(line) else { continue };
                let is_task = frame.subtype.starts_with("task_") || frame.subtype == "background_tasks_changed";
                assert_eq!(task.is_some(), is_task, "{}: {line}", path.display());
                if let Some(task) = task {
                    assert_eq!(task.task_id(), frame.task_id.as_deref(), "{line}");
                    seen.insert(frame.subtype);
                }
            }
        }
    }
    let all = ["background_tasks_changed", "task_notification", "task_progress", "task_started", "task_updated"];
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), all, "the corpus holds every kind");
}

#[test]
fn permission_requests_carry_tool_and_input() {
    let evs = events("transcripts-2.1.330", "05a-perm-allow.stdout.jsonl");
    let req = evs.iter().find_map(|e| match e {
        CliEvent::ControlRequest { request_id, request: ControlRequest::CanUseTool { tool_name, input, .. } } => {
            Some((request_id.clone(), tool_name.clone(), input.clone()))
        }
        _ => None,
    });
    let (id, tool, input) = req.expect("a can_use_tool request");
    assert_eq!(tool, "Bash");
    assert!(!id.is_empty());
    assert!(input["command"].as_str().unwrap().contains("perm-ok"));
}

#[test]
fn unknown_resumed_session_is_detected() {
    let evs = events("transcripts-2.1.197", "08c-resume-unknown-session.stdout.jsonl");
    match &evs[..] {
        [CliEvent::Result { result: r, .. }] => assert!(is_missing_session(r)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn replayed_user_messages_carry_our_uuid() {
    let evs = events("transcripts-2.1.197", "01c-replay-user-messages.stdout.jsonl");
    assert!(evs.contains(&CliEvent::UserReplay { uuid: "11111111-1111-4111-8111-111111111111".into() }));
}

#[test]
fn tool_results_are_not_replays() {
    let line = r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result"}]},"parent_tool_use_id":null,"uuid":"x"}"#;
    assert_eq!(parse_line(line).unwrap(), CliEvent::Other { kind: "user".into() });
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    assert!(parse_line("not json").is_err());
    assert!(parse_line("{\"no\":\"type\"}").is_err());
    assert!(matches!(parse_line(r#"{"type":"brand_new"}"#).unwrap(), CliEvent::Other { .. }));
}

#[test]
fn written_lines_are_single_json_lines() {
    let line = user_message("multi\nline \"quoted\"", &[], "u1");
    assert!(!line.contains('\n'));
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["message"]["content"], "multi\nline \"quoted\"");
    let ok: Value = serde_json::from_str(&control_success("r1", allow(&json!({"a": 1})))).unwrap();
    assert_eq!(ok["response"]["response"]["updatedInput"]["a"], 1);
}

#[test]
fn a_message_with_images_is_a_text_block_then_one_base64_block_each() {
    let images = [
        crate::domain::media::ModelImage { media_type: "image/jpeg".into(), data: vec![0xff, 0xd8, 0xff] },
        crate::domain::media::ModelImage { media_type: "image/png".into(), data: b"\x89PNG".to_vec() },
    ];
    let v: Value = serde_json::from_str(&user_message("look <here>", &images, "u2")).unwrap();
    let blocks = v["message"]["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 3);
    assert_eq!(blocks[0], json!({"type": "text", "text": "look <here>"}));
    assert_eq!(blocks[1]["source"], json!({"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}));
    assert_eq!(blocks[2]["source"]["media_type"], "image/png");
    assert_eq!(v["uuid"], "u2");
}

#[test]
fn an_old_clis_repeated_error_names_its_status_only_in_the_text() {
    // 2.1.197, after its retries on 529: `api_error_status` is null.
    let line = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: Repeated 529 Overloaded errors. The API is at capacity.","terminal_reason":"completed","api_error_status":null,"api_error_type":null,"session_id":"s"}"#;
    let CliEvent::Result { end, .. } = parse_line(line).unwrap() else { panic!("a result") };
    assert_eq!(end.api_error.expect("an API error").status, Some(529));
    let single =
        r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500 boom","session_id":"s"}"#;
    let CliEvent::Result { end, .. } = parse_line(single).unwrap() else { panic!("a result") };
    assert_eq!(end.api_error.expect("an API error").status, Some(500));
    let other = r#"{"type":"result","subtype":"success","is_error":true,"result":"Not logged in","session_id":"s"}"#;
    let CliEvent::Result { end, .. } = parse_line(other).unwrap() else { panic!("a result") };
    assert!(end.api_error.is_none());
}

#[test]
fn a_background_agents_transcript_gives_its_calls_and_its_subagents_calls() {
    let evs = events("transcripts-2.1.330", "03a-bg-agent.stdout.jsonl");
    let calls: Vec<&ToolCall> = evs
        .iter()
        .filter_map(|e| match e {
            CliEvent::ToolCalls(calls) => Some(calls),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let agent =
        ToolKind::Agent { description: "bg helper".into(), subagent_type: Some("general-purpose".into()), name: None };
    assert_eq!((&calls[0].id[..], &calls[0].tool, calls[0].background), ("toolu_ag1", &agent, true));
    assert_eq!(calls[0].parent_tool_use_id, None);
    assert_eq!(calls[1].tool, ToolKind::Bash { command: "echo sub-bash-ok".into() });
    assert_eq!(calls[1].parent_tool_use_id.as_deref(), Some("toolu_ag1"), "the subagent's call names its parent");
    let text_only = evs.iter().filter(|e| **e == CliEvent::Other { kind: "assistant".into() }).count();
    assert_eq!(text_only, 3, "text-only assistant lines stay Other");
}

/// A `hook_callback` as 2.1.330 printed it for a read-only `echo` (seen with
/// the hook `initialize_line` registers; docs/cli-observations.md).
#[test]
fn a_pre_tool_use_hook_call_carries_tool_input_and_cwd() {
    let line = r#"{"type":"control_request","request_id":"3a7a","request":{"subtype":"hook_callback","callback_id":"pincer_pre_tool_use","input":{"session_id":"s1","transcript_path":"/h/.claude/projects/-w/s1.jsonl","cwd":"/workspace/group","permission_mode":"default","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"echo hi"},"tool_use_id":"toolu_0000"},"tool_use_id":"toolu_0000"}}"#;
    let CliEvent::ControlRequest { request_id, request } = parse_line(line).unwrap() else {
        panic!("a control request")
    };
    assert_eq!(request_id, "3a7a");
    assert_eq!(
        request,
        ControlRequest::HookCallback {
            callback_id: PRE_TOOL_HOOK.into(),
            event: "PreToolUse".into(),
            tool_name: "Bash".into(),
            input: json!({"command": "echo hi"}),
            tool_use_id: Some("toolu_0000".into()),
            cwd: Some("/workspace/group".into()),
        }
    );
    let init: Value = serde_json::from_str(&initialize_line("pincer_init", 600)).unwrap();
    assert_eq!(init["request"]["hooks"]["PreToolUse"][0]["hookCallbackIds"][0], PRE_TOOL_HOOK);
    assert_eq!(init["request"]["hooks"]["PreToolUse"][0]["matcher"], "*");
    let answer = hook_answer(HookDecision::Ask, "an admin decides");
    assert_eq!(answer["hookSpecificOutput"]["permissionDecision"], "ask");
}
