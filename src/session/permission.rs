//! The `can_use_tool` policy: a group's allowed list, by exact name or by a
//! prefix ending in `*` (`mcp__pincer__*`). A tool not on the list goes to the
//! group's admins for approval when the group has any; otherwise it is denied
//! with a message that tells the operator how to allow it. Pincer's own tools
//! (`mcp__pincer__*`) are always allowed.

use serde_json::Value;

use crate::domain::GroupName;

/// The answer to one `can_use_tool` request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Ask the group's admins.
    Ask,
    Deny(String),
}

pub fn decide(group: &GroupName, tool_name: &str, allowed: &[String], has_admins: bool) -> Verdict {
    // Pincer's own tools are allowed whatever the group's list says: they
    // check for themselves what a group may do.
    if tool_name.starts_with(crate::claude::mcp::TOOL_PREFIX) {
        return Verdict::Allow;
    }
    let matches = |rule: &String| match rule.strip_suffix('*') {
        Some(prefix) => tool_name.starts_with(prefix),
        None => rule == tool_name,
    };
    if allowed.iter().any(matches) {
        Verdict::Allow
    } else if has_admins {
        Verdict::Ask
    } else {
        Verdict::Deny(format!(
            "pincer: the tool `{tool_name}` is not allowed for group `{group}`. \
             An operator can allow it in the group's allowed tools (`pincer groups set {group} --allow {tool_name}`), \
             in `[claude] allowed_tools` in pincer.toml, or name admins who approve tools (`--admin USER_ID`)."
        ))
    }
}

/// How long an approval prompt's rendering of the tool input may be.
const SUMMARY_CHARS: usize = 600;

/// A short rendering of a tool call for a person to judge: the command of a
/// shell call, the path of a file edit, else the input as compact JSON.
pub fn summarize(tool_name: &str, input: &Value) -> String {
    let field = |name: &str| input.get(name).and_then(Value::as_str).map(str::to_owned);
    let text = match tool_name {
        "Bash" => field("command"),
        "Write" | "Edit" | "MultiEdit" | "Read" | "NotebookEdit" => {
            field("file_path").or_else(|| field("notebook_path"))
        }
        "WebFetch" => field("url"),
        "WebSearch" => field("query"),
        _ => None,
    }
    .unwrap_or_else(|| input.to_string());
    truncate(&text, SUMMARY_CHARS)
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_names_and_prefixes() {
        let g: GroupName = "g".parse().unwrap();
        let allowed = vec!["Bash".to_owned(), "mcp__pincer__*".to_owned()];
        assert_eq!(decide(&g, "Bash", &allowed, false), Verdict::Allow);
        assert_eq!(decide(&g, "mcp__pincer__send_message", &allowed, false), Verdict::Allow);
        assert!(matches!(decide(&g, "BashOutput", &allowed, false), Verdict::Deny(m) if m.contains("`BashOutput`")));
        assert!(matches!(decide(&g, "Write", &[], false), Verdict::Deny(_)));
        assert_eq!(decide(&g, "Write", &[], true), Verdict::Ask, "admins decide what the list does not");
        assert_eq!(decide(&g, "Bash", &allowed, true), Verdict::Allow);
        assert_eq!(decide(&g, "mcp__pincer__schedule_task", &[], true), Verdict::Allow, "pincer's own tools");
    }

    #[test]
    fn summaries_show_what_matters_and_stay_short() {
        let bash = serde_json::json!({"command": "ls -la", "description": "list"});
        assert_eq!(summarize("Bash", &bash), "ls -la");
        let write = serde_json::json!({"file_path": "/w/notes.md", "content": "x"});
        assert_eq!(summarize("Write", &write), "/w/notes.md");
        let other = serde_json::json!({"a": 1});
        assert_eq!(summarize("mcp__x__y", &other), r#"{"a":1}"#);
        let long = serde_json::json!({"command": "é".repeat(1000)});
        let s = summarize("Bash", &long);
        assert_eq!(s.chars().count(), SUMMARY_CHARS + 1);
        assert!(s.ends_with('…'));
    }
}
