//! Which frames of one CLI process pincer believes, decided without I/O.
//!
//! The CLI's stdout is the CLI's alone (its stdio are socket pairs no code in
//! the sandbox can open), but pincer still takes nothing on faith: a result
//! must come while a turn pincer started runs (or the follow-up of a task),
//! a frame must carry the session's own id, and a `can_use_tool` must be for
//! a call pincer's `PreToolUse` hook sent there. What fails is kept as
//! evidence and never delivered (`actor/stdout.rs`, `actor/tools.rs`).
//!
//! The gate is closed until the CLI takes pincer's hook ([`Hooks::Active`]):
//! no user message is written before that (they are held here and go the
//! moment the hook is taken; a process that never takes it is stopped and
//! its messages wait in pincer), and no frame of a turn is believed. Before
//! it only two things are: a resume's refusal, which the CLI prints at start
//! before it reads stdin (it only makes the next process start fresh), and
//! the handshake of pincer's own MCP server, which the CLI starts before it
//! answers `initialize` (it runs nothing; a tool call waits for the hook).

use std::collections::VecDeque;

use crate::domain::InboundId;

/// How many hook-asked calls may wait for their `can_use_tool` at once; the
/// CLI asks right after the hook answers, so a few are in flight at most.
const ASKED_AT_MOST: usize = 64;

/// Why a frame was not believed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Untrusted {
    /// A `result` while pincer started no turn and expects no follow-up.
    ResultOutOfTurn,
    /// A frame naming another session than the process's own.
    ForeignSession,
    /// A `can_use_tool` for a call pincer's hook did not send there.
    UnknownToolUse,
    /// A hook callback pincer never registered.
    UnknownHook,
    /// Any frame of a process that refused pincer's hook (or never
    /// answered it): its gate would be open.
    NoHook,
    /// A frame of a turn, or a control request, before the CLI took
    /// pincer's hook: no message was written yet, so no turn can run.
    BeforeHook,
}

impl Untrusted {
    pub fn as_str(self) -> &'static str {
        match self {
            Untrusted::ResultOutOfTurn => "a result outside any turn pincer started",
            Untrusted::ForeignSession => "a frame of another session",
            Untrusted::UnknownToolUse => "a permission request for a tool call pincer's hook did not ask about",
            Untrusted::UnknownHook => "a hook callback pincer did not register",
            Untrusted::NoHook => "a frame of a process that has not taken pincer's PreToolUse hook",
            Untrusted::BeforeHook => "a frame before the CLI took pincer's PreToolUse hook",
        }
    }
}

/// Where pincer's `initialize` (the `PreToolUse` hook) stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hooks {
    /// Written, not answered yet.
    #[default]
    Pending,
    /// Answered with success: every tool call passes the hook.
    Active,
    /// Answered with an error, or not within the bound: the process must go.
    Failed(HookFailure),
}

/// Why a process has no hook: both end it, and the chat is told once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookFailure {
    Refused,
    Unanswered,
}

/// What a frame is, as far as the gate goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard {
    /// A control response (pincer's `initialize` answered among them).
    Answer,
    /// A resume's refusal (an unknown session): the CLI prints it at start,
    /// before it answers `initialize`, and exits.
    ResumeRefused,
    /// The CLI setting up pincer's own MCP server (its handshake and the
    /// tool list), which both versions start before they answer
    /// `initialize`: it runs nothing. A tool call is a [`Heard::Request`].
    Setup,
    /// A control request of the CLI: answered in any case, acted on only
    /// with the hook taken.
    Request,
    /// Anything else: a turn's frames (init, replays, results, task and
    /// system frames, tool calls, errors).
    Turn,
}

/// A user message for the CLI's stdin: which one, and its line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserLine {
    pub id: InboundId,
    pub line: String,
    /// When it was accepted, for the stdin-write latency (a new message's only).
    pub accepted_at: Option<std::time::Instant>,
}

/// One process's trust state.
#[derive(Debug, Default)]
pub struct Trust {
    /// Whether the CLI took pincer's hook.
    hooks: Hooks,
    /// The session id of this process's first `init`.
    session: Option<String>,
    /// Calls the hook answered `ask` for: (tool use id, tool name).
    asked: VecDeque<(String, String)>,
    /// User messages waiting for the hook, in order, each message once
    /// (bounded by the messages pincer takes at once).
    held: Vec<UserLine>,
}

impl Trust {
    /// The answer to pincer's `initialize` came (only the first counts: a
    /// failed hook is never revived by a later frame).
    pub fn initialized(&mut self, ok: bool) -> Hooks {
        if self.hooks == Hooks::Pending {
            self.hooks = if ok { Hooks::Active } else { Hooks::Failed(HookFailure::Refused) };
        }
        self.drop_held_unless_active();
        self.hooks
    }

    /// The bound for the answer passed: unanswered counts as refused.
    pub fn overdue(&mut self) -> Hooks {
        if self.hooks == Hooks::Pending {
            self.hooks = Hooks::Failed(HookFailure::Unanswered);
        }
        self.drop_held_unless_active();
        self.hooks
    }

    /// A process without the hook is stopped: what it held stays pending
    /// in pincer for the next one.
    fn drop_held_unless_active(&mut self) {
        if matches!(self.hooks, Hooks::Failed(_)) {
            self.held.clear();
        }
    }

    /// A user message to write: returned to be written now once the hook is
    /// taken; held until then (a later line of the same message replaces the
    /// held one); dropped for a process without the hook, which is stopped.
    pub fn user_message(&mut self, message: UserLine) -> Option<UserLine> {
        match self.hooks {
            Hooks::Active => Some(message),
            Hooks::Pending => {
                self.held.retain(|held| held.id != message.id);
                self.held.push(message);
                None
            }
            Hooks::Failed(_) => None,
        }
    }

    /// The held user messages, in order, once the hook is taken (none before).
    pub fn release_held(&mut self) -> Vec<UserLine> {
        if self.hooks != Hooks::Active {
            return Vec::new();
        }
        std::mem::take(&mut self.held)
    }

    /// Whether a frame may be acted on at all (the checks of its kind follow):
    /// before the hook is taken only control answers, the setup of pincer's
    /// tool server and a resume's refusal are; a process whose hook failed is
    /// believed in nothing but its answers.
    pub fn gate(&self, heard: Heard) -> Result<(), Untrusted> {
        match (self.hooks, heard) {
            (_, Heard::Answer) | (Hooks::Active, _) | (Hooks::Pending, Heard::ResumeRefused | Heard::Setup) => Ok(()),
            (Hooks::Failed(_), _) => Err(Untrusted::NoHook),
            (Hooks::Pending, Heard::Request | Heard::Turn) => Err(Untrusted::BeforeHook),
        }
    }

    /// Where the hook stands.
    pub fn hooks(&self) -> Hooks {
        self.hooks
    }

    /// Still waiting for the `initialize` answer.
    pub fn hooks_pending(&self) -> bool {
        self.hooks == Hooks::Pending
    }

    /// An `init` frame: the first one names the process's session.
    pub fn init(&mut self, session_id: Option<&str>) -> Result<(), Untrusted> {
        match (&self.session, session_id) {
            (None, Some(id)) => {
                self.session = Some(id.to_owned());
                Ok(())
            }
            _ => self.own_session(session_id),
        }
    }

    /// A frame's `session_id` is the process's own (or absent, or not known yet).
    pub fn own_session(&self, session_id: Option<&str>) -> Result<(), Untrusted> {
        match (&self.session, session_id) {
            (Some(own), Some(id)) if own != id => Err(Untrusted::ForeignSession),
            _ => Ok(()),
        }
    }

    /// A `result` is believed while one is owed (`expected`: a message
    /// waits for one, a turn runs, or a task's follow-up turn is due).
    pub fn result(&self, session_id: Option<&str>, expected: bool) -> Result<(), Untrusted> {
        if !expected {
            return Err(Untrusted::ResultOutOfTurn);
        }
        self.own_session(session_id)
    }

    /// The hook answered `ask` for this call: its `can_use_tool` will follow.
    pub fn hook_asked(&mut self, tool_use_id: &str, tool_name: &str) {
        if self.asked.len() == ASKED_AT_MOST {
            self.asked.pop_front();
        }
        self.asked.push_back((tool_use_id.to_owned(), tool_name.to_owned()));
    }

    /// A `can_use_tool` is believed for a call the hook asked about (each
    /// once). Without the hook (not taken yet, or refused) none is: the
    /// gate fails closed.
    pub fn can_use_tool(&mut self, tool_use_id: Option<&str>, tool_name: &str) -> Result<(), Untrusted> {
        self.gate(Heard::Request)?;
        let found = tool_use_id
            .and_then(|id| self.asked.iter().position(|(asked, name)| asked == id && name == tool_name))
            .ok_or(Untrusted::UnknownToolUse)?;
        self.asked.remove(found);
        Ok(())
    }
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_needs_a_turn_and_the_sessions_own_id() {
        let mut trust = Trust::default();
        assert_eq!(trust.result(Some("s1"), false), Err(Untrusted::ResultOutOfTurn));
        assert_eq!(trust.result(Some("s1"), true), Ok(()), "no session known yet: a resume's refusal comes first");
        trust.init(Some("s1")).unwrap();
        assert_eq!(trust.result(Some("s1"), true), Ok(()));
        assert_eq!(trust.result(None, true), Ok(()));
        assert_eq!(trust.result(Some("s2"), true), Err(Untrusted::ForeignSession));
        assert_eq!(trust.init(Some("s2")), Err(Untrusted::ForeignSession), "a later init of another session");
        assert_eq!(trust.init(Some("s1")), Ok(()));
    }

    #[test]
    fn a_permission_request_must_follow_the_hooks_ask() {
        let mut trust = Trust::default();
        assert_eq!(trust.can_use_tool(Some("t1"), "Bash"), Err(Untrusted::BeforeHook), "no hook yet: closed");
        assert_eq!(trust.initialized(true), Hooks::Active);
        assert_eq!(trust.can_use_tool(Some("t1"), "Bash"), Err(Untrusted::UnknownToolUse));
        trust.hook_asked("t1", "Bash");
        assert_eq!(trust.can_use_tool(Some("t1"), "Write"), Err(Untrusted::UnknownToolUse), "another tool");
        assert_eq!(trust.can_use_tool(None, "Bash"), Err(Untrusted::UnknownToolUse));
        assert_eq!(trust.can_use_tool(Some("t1"), "Bash"), Ok(()));
        assert_eq!(trust.can_use_tool(Some("t1"), "Bash"), Err(Untrusted::UnknownToolUse), "once");
    }

    #[test]
    fn hook_asks_are_bounded() {
        let mut trust = Trust::default();
        trust.initialized(true);
        for i in 0..=ASKED_AT_MOST {
            trust.hook_asked(&format!("t{i}"), "Bash");
        }
        assert_eq!(trust.can_use_tool(Some("t0"), "Bash"), Err(Untrusted::UnknownToolUse), "the oldest left");
        assert_eq!(trust.can_use_tool(Some(&format!("t{ASKED_AT_MOST}")), "Bash"), Ok(()));
    }

    #[test]
    fn a_refused_or_unanswered_hook_fails_closed_for_good() {
        let mut trust = Trust::default();
        assert!(trust.hooks_pending());
        assert_eq!(trust.initialized(false), Hooks::Failed(HookFailure::Refused));
        assert_eq!(trust.gate(Heard::Turn), Err(Untrusted::NoHook), "nothing of it is believed");
        assert_eq!(trust.gate(Heard::ResumeRefused), Err(Untrusted::NoHook));
        assert_eq!(trust.gate(Heard::Setup), Err(Untrusted::NoHook));
        trust.hook_asked("t1", "Bash");
        assert_eq!(trust.can_use_tool(Some("t1"), "Bash"), Err(Untrusted::NoHook), "not even an asked call");
        assert_eq!(trust.initialized(true), Hooks::Failed(HookFailure::Refused), "a later success revives nothing");
        assert_eq!(trust.overdue(), Hooks::Failed(HookFailure::Refused));

        let mut silent = Trust::default();
        assert_eq!(silent.overdue(), Hooks::Failed(HookFailure::Unanswered));
        assert_eq!(silent.initialized(true), Hooks::Failed(HookFailure::Unanswered), "too late");
        assert_eq!(silent.gate(Heard::Request), Err(Untrusted::NoHook));

        let mut taken = Trust::default();
        taken.initialized(true);
        assert_eq!(taken.overdue(), Hooks::Active, "answered in time: the bound is moot");
        assert!(taken.gate(Heard::Turn).is_ok());
    }

    #[test]
    fn before_the_hook_only_answers_and_a_resumes_refusal_are_believed() {
        let mut trust = Trust::default();
        assert_eq!(trust.gate(Heard::Turn), Err(Untrusted::BeforeHook), "a result, task frame, replay: not yet");
        assert_eq!(trust.gate(Heard::Request), Err(Untrusted::BeforeHook), "a hook callback or MCP call: not yet");
        assert_eq!(trust.gate(Heard::Answer), Ok(()), "the answer to initialize itself");
        assert_eq!(trust.gate(Heard::ResumeRefused), Ok(()), "printed at start, before initialize is read");
        assert_eq!(trust.gate(Heard::Setup), Ok(()), "the MCP handshake comes before the answer");
        trust.initialized(true);
        for heard in [Heard::Answer, Heard::ResumeRefused, Heard::Setup, Heard::Request, Heard::Turn] {
            assert_eq!(trust.gate(heard), Ok(()), "{heard:?}");
        }
    }

    fn message(id: i64, line: &str) -> UserLine {
        UserLine { id: InboundId(id), line: line.into(), accepted_at: None }
    }

    #[test]
    fn user_messages_wait_for_the_hook_then_go_in_order() {
        let mut trust = Trust::default();
        assert_eq!(trust.user_message(message(1, "one")), None, "held");
        assert_eq!(trust.user_message(message(2, "two")), None);
        assert_eq!(trust.user_message(message(1, "one again")), None, "written anew: replaces the held line");
        assert_eq!(trust.release_held(), [], "nothing goes while the hook is pending");
        trust.initialized(true);
        assert_eq!(trust.release_held(), [message(2, "two"), message(1, "one again")]);
        assert_eq!(trust.release_held(), [], "each once");
        assert_eq!(trust.user_message(message(3, "three")), Some(message(3, "three")), "written at once now");
    }

    #[test]
    fn a_process_without_the_hook_gets_no_user_message() {
        for fail in [|t: &mut Trust| t.initialized(false), |t: &mut Trust| t.overdue()] {
            let mut trust = Trust::default();
            trust.user_message(message(1, "one"));
            fail(&mut trust);
            assert_eq!(trust.user_message(message(2, "two")), None, "not written, not held");
            assert_eq!(trust.initialized(true), trust.hooks(), "a late success revives nothing");
            assert_eq!(trust.release_held(), [], "what it held stays pending in pincer only");
        }
    }
}
