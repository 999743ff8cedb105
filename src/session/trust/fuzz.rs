//! A fuzz property of the gate's permission decision (issue 44): a
//! `can_use_tool` line with odd fields (unknown, missing, repeated or
//! mistyped keys, huge or unicode-tricky tool names and ids, `~`- and
//! space-padded paths, a suggestion list) goes through the parser and
//! [`Trust`] as the actor takes it, and reaches the admins only when it
//! names, exactly, a call pincer's hook answered `ask` for, once, with the
//! hook taken. `actor/tools.rs` asks the admins on `Ok` and denies on
//! `Err`: there is no third way, so no such frame is ever allowed without
//! a person's answer. `PROPTEST_CASES` runs more cases than the default 256.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::{Trust, Untrusted};
use crate::claude::protocol::{parse_line, CliEvent, ControlRequest};

/// The calls the hook answered `ask` for.
const ASKED: [(&str, &str); 2] = [("toolu_01Ask", "Bash"), ("toolu_02Ask", "Write")];

/// Ids: the asked ones, near misses of them, and anything.
fn tool_use_id() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!("toolu_01Ask")),
        Just(json!("toolu_02Ask")),
        Just(json!(" toolu_01Ask")),
        Just(json!("toolu_01Ask ")),
        Just(json!("TOOLU_01ASK")),
        Just(json!("toolu_01Ask\u{200b}")),
        Just(json!("toolu_0lAsk")),
        Just(json!("toolu_never_hooked")),
        Just(json!(["toolu_01Ask"])),
        Just(json!({"id": "toolu_01Ask"})),
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        (1usize..100_000).prop_map(|n| Value::from("toolu_01Ask".repeat(n / 11 + 1))),
        ".{0,30}".prop_map(Value::from),
    ]
}

/// Tool names: the asked ones, lookalikes, and anything.
fn tool_name() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!("Bash")),
        Just(json!("Write")),
        Just(json!("bash")),
        Just(json!("Bash ")),
        Just(json!("B\u{430}sh")),
        Just(json!("Bash\u{0}")),
        Just(json!("Write\u{301}")),
        Just(json!("Edit")),
        Just(json!("mcp__pincer__send_file")),
        Just(Value::Null),
        Just(json!(["Bash"])),
        any::<bool>().prop_map(Value::Bool),
        (1usize..100_000).prop_map(|n| Value::from("W".repeat(n))),
        ".{0,30}".prop_map(Value::from),
    ]
}

/// Inputs with paths spelled every way a member could try.
fn input() -> impl Strategy<Value = Value> {
    let path = prop_oneof![
        Just("~/.npmrc".to_owned()),
        Just(" notes.md ".to_owned()),
        Just("~".to_owned()),
        Just("../../home/agent/.bashrc".to_owned()),
        Just("/workspace/group/.git/config".to_owned()),
        Just("sub/.claude/skills/evil/SKILL.md".to_owned()),
        Just("n\u{200b}otes.md".to_owned()),
        (1usize..5000).prop_map(|n| "a/".repeat(n)),
        ".{0,60}",
    ];
    prop_oneof![
        path.clone().prop_map(|p| json!({"file_path": p, "content": "x"})),
        path.prop_map(|p| json!({"command": format!("cat {p}")})),
        Just(Value::Null),
        Just(json!("not an object")),
    ]
}

/// A suggestion list the CLI may add (pincer's answer never echoes it).
fn suggestions() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(json!([{"type": "addRules", "rules": [{"toolName": "Bash"}], "behavior": "allow",
            "destination": "session"}]))),
        Just(Some(json!([{"type": "setMode", "mode": "bypassPermissions", "destination": "session"}]))),
        Just(Some(json!("allow"))),
    ]
}

/// One `request` member: (key, value), written in this order, repeats kept.
type Member = (String, Value);

/// The members of a `can_use_tool` request: the usual ones (each maybe
/// missing), then extra ones: unknown keys, or a repeat of a usual one.
fn members() -> impl Strategy<Value = Vec<Member>> {
    let usual = (prop::option::weighted(0.9, tool_name()), prop::option::weighted(0.9, tool_use_id()), input());
    let extra = prop_oneof![
        tool_name().prop_map(|v| ("tool_name".to_owned(), v)),
        tool_use_id().prop_map(|v| ("tool_use_id".to_owned(), v)),
        Just(("subtype".to_owned(), json!("can_use_tool"))),
        Just(("blocked_path".to_owned(), json!("/home/agent/.npmrc"))),
        Just(("decision_reason".to_owned(), json!("allowed by the hook"))),
        "[a-z_]{1,12}".prop_map(|k| (k, json!(true))),
    ];
    (usual, prop::collection::vec(extra, 0..3)).prop_map(|((name, id, input), extra)| {
        let mut out: Vec<Member> = vec![("subtype".into(), json!("can_use_tool"))];
        out.extend(name.map(|v| ("tool_name".into(), v)));
        out.extend(id.map(|v| ("tool_use_id".into(), v)));
        out.push(("input".into(), input));
        out.extend(extra);
        out
    })
}

/// The line, written by hand so repeated keys stay repeated.
fn line(members: &[Member], suggestions: Option<Value>) -> String {
    let mut body: Vec<String> = members.iter().map(|(k, v)| format!("{}:{v}", Value::from(k.as_str()))).collect();
    if let Some(s) = suggestions {
        body.push(format!("\"permission_suggestions\":{s}"));
    }
    format!(r#"{{"type":"control_request","request_id":"r1","request":{{{}}}}}"#, body.join(","))
}

/// A trust state whose hook asked about [`ASKED`] (taken or not).
fn trust(hook_taken: bool) -> Trust {
    let mut trust = Trust::default();
    if hook_taken {
        trust.initialized(true);
    }
    for (id, name) in ASKED {
        trust.hook_asked(id, name);
    }
    trust
}

proptest! {
    #[test]
    fn an_odd_permission_request_reaches_the_admins_only_for_a_call_the_hook_asked_about(
        frames in prop::collection::vec((members(), suggestions()), 1..4),
        hook_taken in any::<bool>(),
    ) {
        let mut trust = trust(hook_taken);
        let mut admitted: Vec<(String, String)> = Vec::new();
        for (members, suggested) in frames {
            let Ok(CliEvent::ControlRequest { request: ControlRequest::CanUseTool { tool_name, tool_use_id, .. }, .. }) =
                parse_line(&line(&members, suggested))
            else {
                continue;
            };
            match trust.can_use_tool(tool_use_id.as_deref(), &tool_name) {
                Ok(()) => {
                    let id = tool_use_id.expect("admitted without an id");
                    prop_assert!(hook_taken, "admitted before the hook was taken");
                    prop_assert!(ASKED.contains(&(id.as_str(), tool_name.as_str())), "not asked: {id:?} {tool_name:?}");
                    prop_assert!(!admitted.contains(&(id.clone(), tool_name.clone())), "admitted twice: {id:?}");
                    admitted.push((id, tool_name));
                }
                Err(why) => {
                    let expected = [Untrusted::UnknownToolUse, Untrusted::BeforeHook];
                    prop_assert!(expected.contains(&why), "{why:?}");
                    prop_assert!(hook_taken || why == Untrusted::BeforeHook);
                }
            }
        }
    }
}
