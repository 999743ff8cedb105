//! Pincer's own vocabulary: group names, inbound messages, what goes back to a
//! chat, and what a turn or a task frame means to us. No I/O lives here, and no
//! foreign wire type (CLI JSON, Telegram) leaks in: adapters translate at the edge.

use std::fmt;
use std::str::FromStr;
use std::time::{Instant, SystemTime};

use serde::Serialize;

/// A validated group name: `^[a-z0-9][a-z0-9_-]{0,63}$`.
///
/// The name doubles as a folder under `groups/`, so the rule is what keeps a
/// name from ever escaping that folder (no `/`, no `.`, no `..`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct GroupName(String);

/// Why a string is not a usable group name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid group name {name:?}: use 1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit")]
pub struct InvalidGroupName {
    pub name: String,
}

impl GroupName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for GroupName {
    type Err = InvalidGroupName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = s.as_bytes();
        let first_ok = bytes.first().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let rest_ok = bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-');
        if first_ok && rest_ok && bytes.len() <= 64 {
            Ok(GroupName(s.to_owned()))
        } else {
            Err(InvalidGroupName { name: s.to_owned() })
        }
    }
}

impl fmt::Display for GroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A channel pincer delivers to: the terminal of `pincer chat`, or a chat platform.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Platform {
    /// `pincer chat NAME`; also where a group without a chat keeps its replies.
    Console,
    Telegram,
    WhatsApp,
}

impl Platform {
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Console => "console",
            Platform::Telegram => "telegram",
            Platform::WhatsApp => "whatsapp",
        }
    }

    /// The inverse of [`Platform::as_str`], for stored rows.
    pub fn parse(s: &str) -> Option<Platform> {
        [Platform::Console, Platform::Telegram, Platform::WhatsApp].into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One chat on one platform, or one thread of it (a Telegram forum topic):
/// where a group lives and where its replies go. `chat` and `thread` are the
/// platform's own ids as text; only the platform's adapter reads them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChatAddress {
    pub platform: Platform,
    pub chat: String,
    pub thread: Option<String>,
}

impl ChatAddress {
    /// The terminal of a group: where a group without a chat keeps its replies.
    pub fn console(group: &GroupName) -> ChatAddress {
        ChatAddress { platform: Platform::Console, chat: group.as_str().to_owned(), thread: None }
    }

    /// A Telegram chat id, and maybe a forum topic of it.
    pub fn telegram(chat_id: i64, topic: Option<i64>) -> ChatAddress {
        ChatAddress { platform: Platform::Telegram, chat: chat_id.to_string(), thread: topic.map(|t| t.to_string()) }
    }
}

/// The digits of a number as people write it (`+49 151 1234-5678` →
/// `4915112345678`, the user part of its WhatsApp JID); `None` when anything
/// but digits and `+ - ( )` or spaces is in it, or no digit is.
pub fn number_digits(written: &str) -> Option<String> {
    let digits: String = written.chars().filter(|c| !matches!(c, '+' | ' ' | '-' | '(' | ')')).collect();
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(digits)
}

/// Why a string is not a WhatsApp group JID.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{jid:?} is not a WhatsApp group JID: it looks like 120363012345678901@g.us (digits, maybe one '-', then @g.us); \
     send /chatid in the group to see it"
)]
pub struct InvalidGroupJid {
    pub jid: String,
}

impl ChatAddress {
    /// A WhatsApp group, by its JID (`120363012345678901@g.us`; older groups
    /// are `<creator's number>-<seconds>@g.us`).
    pub fn whatsapp_group(jid: &str) -> Result<ChatAddress, InvalidGroupJid> {
        let invalid = || InvalidGroupJid { jid: jid.to_owned() };
        let user = jid.trim().strip_suffix("@g.us").ok_or_else(invalid)?;
        let mut parts = user.split('-');
        let digits = |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        let first_ok = digits(parts.next());
        let rest_ok = match parts.next() {
            None => true,
            second => digits(second) && parts.next().is_none(),
        };
        if !(first_ok && rest_ok) {
            return Err(invalid());
        }
        Ok(ChatAddress { platform: Platform::WhatsApp, chat: jid.trim().to_owned(), thread: None })
    }
}

impl fmt::Display for ChatAddress {
    /// `telegram -1001234 topic 7`, `console main`: as `groups list` shows it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.platform, self.chat)?;
        match &self.thread {
            Some(thread) => write!(f, " topic {thread}"),
            None => Ok(()),
        }
    }
}

/// Where an inbound message came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Console,
    /// A person in a chat on a platform.
    Chat(Platform),
    /// A scheduled prompt that came due (see `scheduler`).
    Scheduled,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Console => "console",
            Source::Chat(platform) => platform.as_str(),
            Source::Scheduled => "scheduled",
        }
    }

    /// The inverse of [`Source::as_str`], for stored messages.
    pub fn parse(s: &str) -> Option<Source> {
        match s {
            "console" => Some(Source::Console),
            "scheduled" => Some(Source::Scheduled),
            other => Platform::parse(other).map(Source::Chat),
        }
    }

    /// A chat with several people, where the agent must be told who speaks.
    fn is_chat(self) -> bool {
        matches!(self, Source::Chat(_))
    }
}

/// A chat message addressed to one group's agent.
#[derive(Clone, Debug)]
pub struct Inbound {
    pub group: GroupName,
    pub source: Source,
    /// The sender's display name.
    pub sender: String,
    /// The sender's id in its channel (a Telegram user id).
    pub sender_id: Option<String>,
    pub text: String,
    /// When the chat says the message was written.
    pub sent_at: SystemTime,
    /// Who and what this message answers: "Name: first words".
    pub reply_to: Option<String>,
    /// When pincer accepted the message; used only for latency metrics.
    pub accepted_at: Instant,
    /// The platform's id of the message, where it may deliver one twice
    /// (WhatsApp after a reconnect): a second copy is refused when stored.
    pub external_id: Option<String>,
}

impl Inbound {
    pub fn new(group: GroupName, source: Source, sender: impl Into<String>, text: impl Into<String>) -> Self {
        Inbound {
            group,
            source,
            sender: sender.into(),
            sender_id: None,
            text: text.into(),
            sent_at: SystemTime::now(),
            reply_to: None,
            accepted_at: Instant::now(),
            external_id: None,
        }
    }

    /// The text the agent reads: chat messages say who wrote them and when,
    /// after the messages the agent missed since it last spoke (`context`).
    /// A console message is passed on as typed.
    pub fn prompt(&self, context: &[ChatLine]) -> String {
        if !self.source.is_chat() && context.is_empty() {
            return self.text.clone();
        }
        let mut out = String::new();
        if !context.is_empty() {
            out.push_str("[Messages in the chat since you last replied, not addressed to you]\n");
            for line in context {
                out.push_str(&line.render());
                out.push('\n');
            }
            out.push('\n');
        }
        let this = ChatLine {
            sender: self.sender.clone(),
            sent_at: self.sent_at,
            reply_to: self.reply_to.clone(),
            text: self.text.clone(),
        };
        out.push_str(&this.render());
        out
    }
}

/// One chat message as the agent reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatLine {
    pub sender: String,
    pub sent_at: SystemTime,
    pub reply_to: Option<String>,
    pub text: String,
}

impl ChatLine {
    /// `[2026-11-22 09:05 UTC] Alice (replying to Bob: lunch?): text`
    pub fn render(&self) -> String {
        let stamp = humantime::format_rfc3339_seconds(self.sent_at).to_string();
        // "2026-11-22T09:05:00Z" → "2026-11-22 09:05 UTC": shorter for the model, still unambiguous.
        let stamp = match (stamp.get(..10), stamp.get(11..16)) {
            (Some(day), Some(time)) => format!("{day} {time} UTC"),
            _ => stamp,
        };
        match &self.reply_to {
            Some(to) => format!("[{stamp}] {} (replying to {to}): {}", self.sender, self.text),
            None => format!("[{stamp}] {}: {}", self.sender, self.text),
        }
    }
}

/// Row id of a stored inbound message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InboundId(pub i64);

/// What a message for a chat is: the kinds of outbox rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutboundKind {
    /// The text of a successful turn.
    Reply,
    /// A turn that ended in an error (interrupted, API failure, ...).
    Error,
    /// Pincer itself speaking: restarts, failures, what to do next.
    Notice,
    /// Pincer answering a chat command (`/status`, `/help`).
    Answer,
}

impl OutboundKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OutboundKind::Reply => "reply",
            OutboundKind::Error => "error",
            OutboundKind::Notice => "notice",
            OutboundKind::Answer => "answer",
        }
    }

    /// The inverse of [`OutboundKind::as_str`], for stored rows.
    pub fn parse(s: &str) -> Option<OutboundKind> {
        [OutboundKind::Reply, OutboundKind::Error, OutboundKind::Notice, OutboundKind::Answer]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// One `result` frame: the end of a CLI turn.
///
/// A turn may answer several messages (one folded into a running tool turn) or
/// none (a follow-up turn started by a background task), so results are never
/// paired one to one with inbound messages.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnResult {
    pub session_id: Option<String>,
    pub subtype: String,
    pub is_error: bool,
    pub text: Option<String>,
    /// Cumulative over the CLI process, as the CLI reports it.
    pub total_cost_usd: Option<f64>,
    pub duration_ms: Option<i64>,
    pub num_turns: Option<i64>,
    /// `origin.kind`, e.g. `task-notification` for a follow-up turn.
    pub origin: Option<String>,
    pub errors: Vec<String>,
}

impl TurnResult {
    /// The text a chat should see for this turn.
    pub fn chat_text(&self) -> String {
        let text = self.base_chat_text();
        // The CLI's own words assume a terminal user who can run /login.
        if self.is_error && (text.contains("Not logged in") || text.contains("Invalid API key")) {
            return format!(
                "{text}\n(pincer: give the agent credentials: set ANTHROPIC_API_KEY in pincer's environment \
                 or in `[claude] env` in pincer.toml, then send the message again)"
            );
        }
        text
    }

    fn base_chat_text(&self) -> String {
        match (&self.text, self.is_error) {
            (Some(text), false) if !text.is_empty() => text.clone(),
            (Some(text), true) if !text.is_empty() => text.clone(),
            (_, false) => "(the agent finished without a reply)".to_owned(),
            (_, true) if !self.errors.is_empty() => {
                format!("The agent's turn failed ({}): {}", self.subtype, self.errors.join("; "))
            }
            (_, true) => format!("The agent's turn ended early ({}).", self.subtype),
        }
    }
}

/// A `system` frame other than `init`: task lifecycle and whatever newer CLIs add.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskFrame {
    pub subtype: String,
    pub session_id: Option<String>,
    pub task_id: Option<String>,
    pub task_type: Option<String>,
    pub status: Option<String>,
    pub summary: Option<String>,
    pub description: Option<String>,
}

/// A tool call the group's policy leaves to a person: the channel shows it
/// with buttons and answers through `respond`. Dropping `respond` (or not
/// answering within the approval timeout) denies the call.
#[derive(Debug)]
pub struct ApprovalRequest {
    /// Unique within this pincer process; short enough for button data.
    pub id: u64,
    pub group: GroupName,
    pub tool_name: String,
    /// The whole input as a person reads it (`session::permission::summarize`): never cut.
    pub summary: String,
    /// When the session stops waiting and denies.
    pub timeout: std::time::Duration,
    pub respond: tokio::sync::oneshot::Sender<ApprovalAnswer>,
}

/// A person's answer to an [`ApprovalRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalAnswer {
    pub verdict: Approval,
    /// Who answered, e.g. `telegram:42 (Alice)`.
    pub by: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approval {
    Allow,
    Deny,
    /// Allow, and add the tool to the group's allowed tools.
    AlwaysAllow,
}

/// A decision on a `can_use_tool` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PermissionDecision {
    pub tool_name: String,
    pub tool_use_id: Option<String>,
    pub input: String,
    pub allowed: bool,
    pub message: Option<String>,
    pub decided_by: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_follow_the_rule() {
        for ok in ["a", "main", "team-1", "x_y", "0abc", &"a".repeat(64)] {
            assert!(ok.parse::<GroupName>().is_ok(), "{ok} should be valid");
        }
        for bad in ["", "-a", "_a", "A", "a/b", "..", "a.b", "a b", &"a".repeat(65), "é"] {
            assert!(bad.parse::<GroupName>().is_err(), "{bad:?} should be invalid");
        }
    }

    #[test]
    fn console_messages_pass_unchanged_and_chat_messages_say_who_and_when() {
        let g: GroupName = "g".parse().unwrap();
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let console = Inbound::new(g.clone(), Source::Console, "console", "hi");
        assert_eq!(console.prompt(&[]), "hi");
        let mut msg = Inbound::new(g, Source::Chat(Platform::Telegram), "Alice", "@Andy what did we decide?");
        msg.sent_at = at;
        assert_eq!(msg.prompt(&[]), "[2023-11-14 22:13 UTC] Alice: @Andy what did we decide?");
        let missed =
            ChatLine { sender: "Bob".into(), sent_at: at, reply_to: Some("Carol: lunch?".into()), text: "noon".into() };
        let prompt = msg.prompt(&[missed]);
        assert!(prompt.starts_with("[Messages in the chat since you last replied"), "{prompt}");
        assert!(
            prompt.contains("[2023-11-14 22:13 UTC] Bob (replying to Carol: lunch?): noon\n\n[2023-11-14"),
            "{prompt}"
        );
        assert!(prompt.ends_with("Alice: @Andy what did we decide?"), "{prompt}");
    }

    #[test]
    fn numbers_are_read_as_people_write_them() {
        assert_eq!(number_digits("+49 (151) 1234-5678").as_deref(), Some("4915112345678"));
        assert_eq!(number_digits("42").as_deref(), Some("42"));
        assert_eq!(number_digits("+49 151 abc"), None);
        assert_eq!(number_digits("+ -"), None);
    }

    #[test]
    fn whatsapp_group_jids_are_checked() {
        for ok in ["120363012345678901@g.us", "4915112345678-1612345678@g.us"] {
            assert_eq!(ChatAddress::whatsapp_group(ok).unwrap().chat, ok);
        }
        for bad in ["120363@s.whatsapp.net", "@g.us", "12a@g.us", "1-2-3@g.us", "1-@g.us", "-1@g.us", "120363"] {
            let e = ChatAddress::whatsapp_group(bad).unwrap_err();
            assert!(e.to_string().contains("120363012345678901@g.us"), "{e}");
        }
    }

    #[test]
    fn error_results_explain_themselves() {
        let r = TurnResult {
            session_id: None,
            subtype: "error_during_execution".into(),
            is_error: true,
            text: None,
            total_cost_usd: None,
            duration_ms: None,
            num_turns: None,
            origin: None,
            errors: vec![],
        };
        assert_eq!(r.chat_text(), "The agent's turn ended early (error_during_execution).");
    }
}
