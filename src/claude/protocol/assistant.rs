//! The tool calls of `assistant` lines, parsed into [`ToolCall`]s that keep
//! only what a one-line summary of the call needs.
//!
//! What the CLI prints (2.1.197 and 2.1.330): one content block per
//! `assistant` line; a `tool_use` block is `{id, name, input}`, and a
//! subagent's lines carry `parent_tool_use_id` (the `Agent` call that started
//! it). The model-side name of the subagent tool is `Agent` (older CLIs:
//! `Task`); with agent teams its input may carry a teammate `name`.
//!
//! Bounded: at most [`MAX_CALLS`] calls per line, and every kept string cut
//! to a few hundred bytes (a file path keeps its end, where its name is), so
//! a huge tool input costs nothing past this parser.

use serde_json::Value;

/// Calls kept from one line (the CLI prints one block per line today).
pub const MAX_CALLS: usize = 16;
/// Longest string kept from a tool's input, in bytes.
const MAX_KEPT: usize = 300;

/// One tool call the model made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The call's id (`toolu_…`): task frames and subagent lines refer to it.
    pub id: String,
    pub tool: ToolKind,
    /// Set when a subagent made the call: the id of the `Agent` call that started it.
    pub parent_tool_use_id: Option<String>,
    /// `run_in_background` in the input: the call becomes a background task.
    /// (2.1.197 does not say so on its `task_started` frames.)
    pub background: bool,
}

/// A tool, with only what a summary of the call needs (each string bounded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolKind {
    Bash {
        command: String,
    },
    Read {
        path: String,
    },
    Write {
        path: String,
    },
    /// `Edit` and `MultiEdit`.
    Edit {
        path: String,
    },
    NotebookEdit {
        path: String,
    },
    Glob {
        pattern: String,
    },
    Grep {
        pattern: String,
    },
    WebSearch {
        query: String,
    },
    WebFetch {
        url: String,
    },
    /// `Agent` (`Task` in older CLIs): a subagent, or a teammate when it has a name.
    Agent {
        description: String,
        subagent_type: Option<String>,
        name: Option<String>,
    },
    TodoWrite,
    /// `mcp__<server>__<tool>`.
    Mcp {
        server: String,
        tool: String,
    },
    /// Any other tool, by name.
    Other(String),
}

/// The tool calls of an `assistant` line (empty for a text-only line).
pub(super) fn tool_calls(v: &Value) -> Vec<ToolCall> {
    let Some(blocks) = v.pointer("/message/content").and_then(Value::as_array) else {
        return Vec::new();
    };
    let parent = v.get("parent_tool_use_id").and_then(Value::as_str);
    blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .take(MAX_CALLS)
        .filter_map(|b| tool_call(b, parent))
        .collect()
}

fn tool_call(block: &Value, parent: Option<&str>) -> Option<ToolCall> {
    let id = block.get("id").and_then(Value::as_str)?;
    let name = block.get("name").and_then(Value::as_str)?;
    let input = block.get("input").unwrap_or(&Value::Null);
    Some(ToolCall {
        id: head(id),
        tool: tool_kind(name, input),
        parent_tool_use_id: parent.map(head),
        background: input.get("run_in_background").and_then(Value::as_bool).unwrap_or(false),
    })
}

fn tool_kind(name: &str, input: &Value) -> ToolKind {
    let first = |key: &str| input.get(key).and_then(Value::as_str).map(head).unwrap_or_default();
    let path = |key: &str| input.get(key).and_then(Value::as_str).map(tail).unwrap_or_default();
    let optional = |key: &str| input.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(head);
    match name {
        "Bash" => ToolKind::Bash { command: first("command") },
        "Read" => ToolKind::Read { path: path("file_path") },
        "Write" => ToolKind::Write { path: path("file_path") },
        "Edit" | "MultiEdit" => ToolKind::Edit { path: path("file_path") },
        "NotebookEdit" => ToolKind::NotebookEdit { path: path("notebook_path") },
        "Glob" => ToolKind::Glob { pattern: first("pattern") },
        "Grep" => ToolKind::Grep { pattern: first("pattern") },
        "WebSearch" => ToolKind::WebSearch { query: first("query") },
        "WebFetch" => ToolKind::WebFetch { url: first("url") },
        "Agent" | "Task" => ToolKind::Agent {
            description: first("description"),
            subagent_type: optional("subagent_type"),
            name: optional("name"),
        },
        "TodoWrite" => ToolKind::TodoWrite,
        _ => match name.strip_prefix("mcp__").and_then(|rest| rest.split_once("__")) {
            Some((server, tool)) => ToolKind::Mcp { server: head(server), tool: head(tool) },
            None => ToolKind::Other(head(name)),
        },
    }
}

/// The first [`MAX_KEPT`] bytes of `s` (cut on a character boundary).
fn head(s: &str) -> String {
    let mut end = s.len().min(MAX_KEPT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// The last [`MAX_KEPT`] bytes of `s`: a path's end holds its name.
fn tail(s: &str) -> String {
    let mut start = s.len().saturating_sub(MAX_KEPT);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(line: &str) -> Vec<ToolCall> {
        tool_calls(&serde_json::from_str(line).unwrap())
    }

    #[test]
    fn a_subagent_call_keeps_its_parent_and_an_agent_call_its_teammate_name() {
        let sub = calls(
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_sub1","name":"Bash","input":{"command":"echo sub-bash-ok","description":"subagent echo"}}]},"parent_tool_use_id":"toolu_ag1"}"#,
        );
        let expected = ToolCall {
            id: "toolu_sub1".into(),
            tool: ToolKind::Bash { command: "echo sub-bash-ok".into() },
            parent_tool_use_id: Some("toolu_ag1".into()),
            background: false,
        };
        assert_eq!(sub, [expected]);

        let team = calls(
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_team2","name":"Agent","input":{"description":"teammate bg","prompt":"long","name":"worker1","run_in_background":true}}]},"parent_tool_use_id":null}"#,
        );
        let agent =
            ToolKind::Agent { description: "teammate bg".into(), subagent_type: None, name: Some("worker1".into()) };
        assert_eq!((&team[0].tool, team[0].background, &team[0].parent_tool_use_id), (&agent, true, &None));
    }

    #[test]
    fn each_tool_keeps_only_its_summary_field() {
        let input = |name: &str, input: &str| {
            let line = format!(
                r#"{{"type":"assistant","message":{{"content":[{{"type":"tool_use","id":"t","name":"{name}","input":{input}}}]}}}}"#
            );
            calls(&line).remove(0).tool
        };
        assert_eq!(
            input("Read", r#"{"file_path":"/a/notes.md","limit":5}"#),
            ToolKind::Read { path: "/a/notes.md".into() }
        );
        assert_eq!(
            input("MultiEdit", r#"{"file_path":"src/x.rs","edits":[]}"#),
            ToolKind::Edit { path: "src/x.rs".into() }
        );
        assert_eq!(
            input("NotebookEdit", r#"{"notebook_path":"n.ipynb"}"#),
            ToolKind::NotebookEdit { path: "n.ipynb".into() }
        );
        assert_eq!(
            input("Grep", r#"{"pattern":"fn main","path":"src"}"#),
            ToolKind::Grep { pattern: "fn main".into() }
        );
        assert_eq!(
            input("WebFetch", r#"{"url":"https://docs.rs/x","prompt":"p"}"#),
            ToolKind::WebFetch { url: "https://docs.rs/x".into() }
        );
        assert_eq!(input("TodoWrite", r#"{"todos":[]}"#), ToolKind::TodoWrite);
        let mcp = ToolKind::Mcp { server: "github".into(), tool: "create_issue".into() };
        assert_eq!(input("mcp__github__create_issue", "{}"), mcp);
        assert_eq!(input("SendMessage", "{}"), ToolKind::Other("SendMessage".into()));
        assert_eq!(input("Bash", "null"), ToolKind::Bash { command: String::new() }, "a missing field costs nothing");
    }

    #[test]
    fn kept_strings_are_bounded_and_a_path_keeps_its_name() {
        let long_dir = "d/".repeat(400);
        let line = format!(
            r#"{{"type":"assistant","message":{{"content":[{{"type":"tool_use","id":"t","name":"Read","input":{{"file_path":"{long_dir}é.md"}}}},{{"type":"tool_use","id":"u","name":"Bash","input":{{"command":"{}"}}}}]}}}}"#,
            "é".repeat(400)
        );
        let got = calls(&line);
        let ToolKind::Read { path } = &got[0].tool else { panic!("{got:?}") };
        assert!(path.len() <= MAX_KEPT && path.ends_with("/é.md"), "{path}");
        let ToolKind::Bash { command } = &got[1].tool else { panic!("{got:?}") };
        assert!(command.len() <= MAX_KEPT && command.starts_with('é'));
        let many = format!(
            r#"{{"type":"assistant","message":{{"content":[{}]}}}}"#,
            vec![r#"{"type":"tool_use","id":"t","name":"TodoWrite","input":{}}"#; 40].join(",")
        );
        assert_eq!(calls(&many).len(), MAX_CALLS);
    }

    #[test]
    fn text_blocks_and_blocks_without_an_id_or_name_are_no_calls() {
        assert!(calls(r#"{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}"#).is_empty());
        assert!(calls(r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash"}]}}"#).is_empty());
        assert!(calls(r#"{"type":"assistant","message":{"content":"plain"}}"#).is_empty());
    }
}
