//! Which frames of one CLI process pincer believes, decided without I/O.
//!
//! The CLI's stdout is the CLI's alone (its stdio are socket pairs no code in
//! the sandbox can open), but pincer still takes nothing on faith: a result
//! must come while a turn pincer started runs (or the follow-up of a task),
//! a frame must carry the session's own id, and a `can_use_tool` must be for
//! a call pincer's `PreToolUse` hook sent there. What fails is kept as
//! evidence and never delivered (`actor/stdout.rs`, `actor/tools.rs`).

use std::collections::VecDeque;

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
    /// Any frame of a process that refused pincer's hook, or has not taken
    /// it yet (for a permission request): its gate would be open.
    NoHook,
}

impl Untrusted {
    pub fn as_str(self) -> &'static str {
        match self {
            Untrusted::ResultOutOfTurn => "a result outside any turn pincer started",
            Untrusted::ForeignSession => "a frame of another session",
            Untrusted::UnknownToolUse => "a permission request for a tool call pincer's hook did not ask about",
            Untrusted::UnknownHook => "a hook callback pincer did not register",
            Untrusted::NoHook => "a frame of a process that has not taken pincer's PreToolUse hook",
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

/// One process's trust state.
#[derive(Debug, Default)]
pub struct Trust {
    /// Whether the CLI took pincer's hook.
    hooks: Hooks,
    /// The session id of this process's first `init`.
    session: Option<String>,
    /// Calls the hook answered `ask` for: (tool use id, tool name).
    asked: VecDeque<(String, String)>,
}

impl Trust {
    /// The answer to pincer's `initialize` came (only the first counts: a
    /// failed hook is never revived by a later frame).
    pub fn initialized(&mut self, ok: bool) -> Hooks {
        if self.hooks == Hooks::Pending {
            self.hooks = if ok { Hooks::Active } else { Hooks::Failed(HookFailure::Refused) };
        }
        self.hooks
    }

    /// The bound for the answer passed: unanswered counts as refused.
    pub fn overdue(&mut self) -> Hooks {
        if self.hooks == Hooks::Pending {
            self.hooks = Hooks::Failed(HookFailure::Unanswered);
        }
        self.hooks
    }

    /// Where the hook stands.
    pub fn hooks(&self) -> Hooks {
        self.hooks
    }

    /// Still waiting for the `initialize` answer.
    pub fn hooks_pending(&self) -> bool {
        self.hooks == Hooks::Pending
    }

    /// Nothing of a process whose hook failed is believed: it is stopped,
    /// and what it prints meanwhile is evidence only.
    pub fn alive(&self) -> Result<(), Untrusted> {
        match self.hooks {
            Hooks::Failed(_) => Err(Untrusted::NoHook),
            _ => Ok(()),
        }
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

    /// The CLI took pincer's hook: a believed `can_use_tool` is then one the
    /// hook answered `ask` for, already decided.
    pub fn hooks_active(&self) -> bool {
        self.hooks == Hooks::Active
    }

    /// A `can_use_tool` is believed for a call the hook asked about (each
    /// once). Without the hook (not taken yet, or refused) none is: the
    /// gate fails closed.
    pub fn can_use_tool(&mut self, tool_use_id: Option<&str>, tool_name: &str) -> Result<(), Untrusted> {
        if !self.hooks_active() {
            return Err(Untrusted::NoHook);
        }
        let found = tool_use_id
            .and_then(|id| self.asked.iter().position(|(asked, name)| asked == id && name == tool_name))
            .ok_or(Untrusted::UnknownToolUse)?;
        self.asked.remove(found);
        Ok(())
    }
}

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
        assert_eq!(trust.can_use_tool(Some("t1"), "Bash"), Err(Untrusted::NoHook), "no hook yet: closed");
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
        assert!(trust.hooks_pending() && trust.alive().is_ok());
        assert_eq!(trust.initialized(false), Hooks::Failed(HookFailure::Refused));
        assert_eq!(trust.alive(), Err(Untrusted::NoHook), "nothing of it is believed");
        trust.hook_asked("t1", "Bash");
        assert_eq!(trust.can_use_tool(Some("t1"), "Bash"), Err(Untrusted::NoHook), "not even an asked call");
        assert_eq!(trust.initialized(true), Hooks::Failed(HookFailure::Refused), "a later success revives nothing");
        assert_eq!(trust.overdue(), Hooks::Failed(HookFailure::Refused));

        let mut silent = Trust::default();
        assert_eq!(silent.overdue(), Hooks::Failed(HookFailure::Unanswered));
        assert_eq!(silent.initialized(true), Hooks::Failed(HookFailure::Unanswered), "too late");
        assert_eq!(silent.alive(), Err(Untrusted::NoHook));

        let mut taken = Trust::default();
        taken.initialized(true);
        assert_eq!(taken.overdue(), Hooks::Active, "answered in time: the bound is moot");
        assert!(taken.alive().is_ok());
    }
}
