//! The commands every chat has for its group's session ([`SessionCommand`]),
//! and how one travels to the group's owner on a cluster: encoded as a
//! closed set ([`encode`], [`decode_command`]), never as the words that were typed,
//! so a stored command can only ever be one of these. Pure: touches nothing.

use serde::{Deserialize, Serialize};

use super::group_commands::{self, BudgetAction, TasksAction};

/// The commands every chat has for its group's session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionCommand {
    Status,
    /// Interrupt the current turn.
    Stop,
    /// A fresh session.
    New,
    /// `/tasks …`: the group's scheduled tasks.
    Tasks(TasksAction),
    /// `/budget …`: what the group spent, and (admins) its budget.
    Budget(BudgetAction),
    /// A fixed answer: the usage of a `/tasks` or `/budget` whose words did
    /// not parse, or a platform's `/help`. One of [`FIXED`] only.
    Usage(#[serde(with = "fixed")] FixedText),
}

/// A fixed answer's text. An alias, so serde does not take the `&'static
/// str` for a borrow of the stored command (it is looked up, [`fixed`]).
type FixedText = &'static str;

impl SessionCommand {
    /// Whether running it changes something (the session, a task, the
    /// budget), so it must run at most once; the others only answer.
    pub fn acts(&self) -> bool {
        match self {
            SessionCommand::Stop | SessionCommand::New => true,
            SessionCommand::Tasks(action) => *action != TasksAction::List,
            SessionCommand::Budget(action) => *action != BudgetAction::Show,
            SessionCommand::Status | SessionCommand::Usage(_) => false,
        }
    }
}

/// The fixed answers a command may carry, by the name it travels under.
pub fn fixed_answers() -> [(&'static str, &'static str); 4] {
    [
        ("tasks_usage", group_commands::TASKS_USAGE),
        ("budget_usage", group_commands::BUDGET_USAGE),
        ("telegram_help", super::help::TELEGRAM),
        ("whatsapp_help", super::help::WHATSAPP),
    ]
}

/// A command as it is stored for the group's owner; `Err` for a fixed
/// answer that is not one of [`fixed_answers`] (a bug: it cannot travel).
pub fn encode(cmd: &SessionCommand) -> Result<String, serde_json::Error> {
    serde_json::to_string(cmd)
}

/// A stored command; `Err` for anything that is not one of the set.
pub fn decode_command(stored: &str) -> Result<SessionCommand, serde_json::Error> {
    serde_json::from_str(stored)
}

/// `Usage`'s text travels as its name in [`fixed_answers`].
mod fixed {
    use serde::{de, ser, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(text: &&'static str, to: S) -> Result<S::Ok, S::Error> {
        let name = super::fixed_answers().into_iter().find(|(_, t)| t == text).map(|(name, _)| name);
        to.serialize_str(name.ok_or_else(|| ser::Error::custom("not one of the fixed answers"))?)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<&'static str, D::Error> {
        let name = String::deserialize(from)?;
        let text = super::fixed_answers().into_iter().find(|(n, _)| *n == name).map(|(_, text)| text);
        text.ok_or_else(|| de::Error::custom(format!("`{name}` is not one of the fixed answers")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<SessionCommand> {
        let mut all = vec![SessionCommand::Status, SessionCommand::Stop, SessionCommand::New];
        for words in ["", "run 3", "pause #4", "resume 5", "nonsense"] {
            all.push(TasksAction::parse(words).map_or_else(SessionCommand::Usage, SessionCommand::Tasks));
        }
        for words in ["", "daily 5", "monthly default", "turns 40", "turns default", "weekly 3"] {
            all.push(BudgetAction::parse(words).map_or_else(SessionCommand::Usage, SessionCommand::Budget));
        }
        all.extend(fixed_answers().map(|(_, text)| SessionCommand::Usage(text)));
        all
    }

    #[test]
    fn every_command_the_chats_send_travels_and_arrives_the_same() {
        for cmd in every_kind() {
            let stored = encode(&cmd).unwrap_or_else(|e| panic!("{cmd:?} cannot travel: {e}"));
            assert_eq!(decode_command(&stored).unwrap(), cmd, "{stored}");
            if let SessionCommand::Usage(text) = cmd {
                assert!(!stored.contains(text), "a fixed answer travels by its name: {stored}");
            }
        }
    }

    #[test]
    fn only_the_closed_set_is_read_back() {
        for stored in ["", "{}", r#""reboot""#, r#"{"usage":"rm -rf /"}"#, r#"{"tasks":{"run":"x"}}"#, "\"Status\""] {
            assert!(decode_command(stored).is_err(), "{stored}");
        }
        assert!(encode(&SessionCommand::Usage("any text")).is_err(), "free text never travels");
        assert_eq!(decode_command(r#""status""#).unwrap(), SessionCommand::Status);
    }

    #[test]
    fn what_changes_something_acts_and_what_only_answers_does_not() {
        let acts = |words: &str| TasksAction::parse(words).map(|a| SessionCommand::Tasks(a).acts()).unwrap();
        assert!(SessionCommand::Stop.acts() && SessionCommand::New.acts());
        assert!(acts("run 1") && acts("pause 1") && acts("resume 1") && !acts(""));
        assert!(SessionCommand::Budget(BudgetAction::Daily(Some(500))).acts());
        assert!(!SessionCommand::Budget(BudgetAction::Show).acts());
        assert!(!SessionCommand::Status.acts() && !SessionCommand::Usage(group_commands::TASKS_USAGE).acts());
    }
}
