//! The `can_use_tool` policy: a group's allowed list, by exact name or by a
//! prefix ending in `*` (`mcp__pincer__*`). Everything else is denied with a
//! message that tells the operator how to allow it.

use crate::domain::GroupName;

/// The answer to one `can_use_tool` request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny(String),
}

pub fn decide(group: &GroupName, tool_name: &str, allowed: &[String]) -> Verdict {
    let matches = |rule: &String| match rule.strip_suffix('*') {
        Some(prefix) => tool_name.starts_with(prefix),
        None => rule == tool_name,
    };
    if allowed.iter().any(matches) {
        Verdict::Allow
    } else {
        Verdict::Deny(format!(
            "pincer: the tool `{tool_name}` is not allowed for group `{group}`. \
             An operator can allow it in the group's allowed tools (`pincer groups add {group} --allow {tool_name}`) \
             or in `[claude] allowed_tools` in pincer.toml."
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_names_and_prefixes() {
        let g: GroupName = "g".parse().unwrap();
        let allowed = vec!["Bash".to_owned(), "mcp__pincer__*".to_owned()];
        assert_eq!(decide(&g, "Bash", &allowed), Verdict::Allow);
        assert_eq!(decide(&g, "mcp__pincer__send_message", &allowed), Verdict::Allow);
        assert!(matches!(decide(&g, "BashOutput", &allowed), Verdict::Deny(m) if m.contains("`BashOutput`")));
        assert!(matches!(decide(&g, "Write", &[]), Verdict::Deny(_)));
    }
}
