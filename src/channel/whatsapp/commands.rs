//! Text commands in a WhatsApp group (WhatsApp has no bot command menu):
//! `/status`, `/stop`, `/new`, `/tasks …`, `/budget …`, `/chatid`, `/help`, and the answers to
//! approval prompts (`allow CODE`, `deny CODE`, `always CODE`, or one of those
//! words in a reply to the prompt).

use crate::domain::Approval;

/// A command a message carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Cmd {
    Status,
    Stop,
    New,
    /// `/tasks` and `/budget` with the words after them (parsed by `group_commands`).
    Tasks(String),
    Budget(String),
    Chatid,
    Help,
    /// An answer to an approval prompt: by its code, or (`None`) by replying to it.
    Answer {
        verdict: Approval,
        code: Option<String>,
    },
}

/// `/help`'s answer (kept in `channel::help`, so it can travel to the group's owner).
pub(super) use crate::channel::help::WHATSAPP as HELP;

impl Cmd {
    /// Whether the command can be run by whichever node sees it first (its
    /// answer goes through the group's outbox): all but an approval's answer,
    /// which only the node showing the prompt can take, and `/chatid`, which
    /// is answered straight to the chat.
    pub fn travels(&self) -> bool {
        !matches!(self, Cmd::Answer { .. } | Cmd::Chatid)
    }

    /// The command `text` is, if any. Commands are case-insensitive and must
    /// be the whole message (a command word inside a sentence is chat).
    pub fn parse(text: &str, replies_to_prompt: bool) -> Option<Cmd> {
        let text = text.trim();
        let lower = text.to_lowercase();
        let mut words = lower.split_whitespace();
        let first = words.next()?;
        // These two take words after them: the rest of the message, as typed.
        let rest = || text.split_once(char::is_whitespace).map_or("", |(_, rest)| rest.trim()).to_owned();
        match first {
            "/tasks" => return Some(Cmd::Tasks(rest())),
            "/budget" => return Some(Cmd::Budget(rest())),
            _ => {}
        }
        let second = words.next();
        if words.next().is_some() {
            return None;
        }
        if let Some(verdict) = verdict(first) {
            return match second {
                Some(code) if is_code(code) => Some(Cmd::Answer { verdict, code: Some(code.to_uppercase()) }),
                None if replies_to_prompt => Some(Cmd::Answer { verdict, code: None }),
                _ => None,
            };
        }
        if second.is_some() {
            return None;
        }
        Some(match first {
            "/status" => Cmd::Status,
            "/stop" => Cmd::Stop,
            "/new" => Cmd::New,
            "/chatid" => Cmd::Chatid,
            "/help" => Cmd::Help,
            _ => return None,
        })
    }
}

fn verdict(word: &str) -> Option<Approval> {
    match word {
        "allow" | "yes" => Some(Approval::Allow),
        "deny" | "no" => Some(Approval::Deny),
        "always" => Some(Approval::AlwaysAllow),
        _ => None,
    }
}

/// Approval codes are four letters or digits (see `approvals::code`).
fn is_code(word: &str) -> bool {
    word.len() == 4 && word.bytes().all(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_a_cluster_every_command_but_an_approvals_answer_and_chatid_travels() {
        for travels in ["/status", "/stop", "/new", "/tasks", "/budget 5", "/help"] {
            assert!(Cmd::parse(travels, false).unwrap().travels(), "{travels}");
        }
        for stays in ["/chatid", "allow AB12", "deny AB12"] {
            assert!(!Cmd::parse(stays, false).unwrap().travels(), "{stays}");
        }
    }

    #[test]
    fn commands_are_whole_messages_in_any_case() {
        assert_eq!(Cmd::parse("/status", false), Some(Cmd::Status));
        assert_eq!(Cmd::parse("  /STOP ", false), Some(Cmd::Stop));
        assert_eq!(Cmd::parse("/new", false), Some(Cmd::New));
        assert_eq!(Cmd::parse("/chatid", false), Some(Cmd::Chatid));
        assert_eq!(Cmd::parse("/help", false), Some(Cmd::Help));
        assert_eq!(Cmd::parse("please /stop now", false), None);
        assert_eq!(Cmd::parse("/status now", false), None);
        assert_eq!(Cmd::parse("/unknown", false), None);
        assert_eq!(Cmd::parse("", false), None);
        assert_eq!(Cmd::parse("/tasks", false), Some(Cmd::Tasks(String::new())));
        assert_eq!(Cmd::parse("/Tasks pause  3", false), Some(Cmd::Tasks("pause  3".into())));
        assert_eq!(Cmd::parse("/budget daily 5", false), Some(Cmd::Budget("daily 5".into())));
        assert_eq!(Cmd::parse("see /budget", false), None);
    }

    #[test]
    fn approvals_are_answered_by_code_or_by_replying() {
        let allow = |code: Option<&str>| Some(Cmd::Answer { verdict: Approval::Allow, code: code.map(str::to_owned) });
        assert_eq!(Cmd::parse("allow k7QZ", false), allow(Some("K7QZ")));
        assert_eq!(Cmd::parse("Allow", true), allow(None));
        assert_eq!(Cmd::parse("allow", false), None, "a bare word that replies to nothing is chat");
        assert_eq!(
            Cmd::parse("always AB12", false),
            Some(Cmd::Answer { verdict: Approval::AlwaysAllow, code: Some("AB12".into()) })
        );
        assert_eq!(Cmd::parse("deny", true), Some(Cmd::Answer { verdict: Approval::Deny, code: None }));
        assert_eq!(Cmd::parse("allow everyone in", false), None);
        assert_eq!(Cmd::parse("allow ABCDE", false), None);
        assert!(HELP.contains("allow CODE"));
    }
}
