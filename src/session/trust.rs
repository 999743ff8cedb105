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
}

impl Untrusted {
    pub fn as_str(self) -> &'static str {
        match self {
            Untrusted::ResultOutOfTurn => "a result outside any turn pincer started",
            Untrusted::ForeignSession => "a frame of another session",
            Untrusted::UnknownToolUse => "a permission request for a tool call pincer's hook did not ask about",
            Untrusted::UnknownHook => "a hook callback pincer did not register",
        }
    }
}

/// One process's trust state.
#[derive(Debug, Default)]
pub struct Trust {
    /// The CLI took pincer's hook (`initialize` answered with success).
    hooks_active: bool,
    /// The session id of this process's first `init`.
    session: Option<String>,
    /// Calls the hook answered `ask` for: (tool use id, tool name).
    asked: VecDeque<(String, String)>,
}

impl Trust {
    /// The answer to pincer's `initialize` came.
    pub fn initialized(&mut self, ok: bool) {
        self.hooks_active = ok;
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
        self.hooks_active
    }

    /// A `can_use_tool` is believed for a call the hook asked about (each
    /// once). Without the hook (a CLI that refused it), every one is.
    pub fn can_use_tool(&mut self, tool_use_id: Option<&str>, tool_name: &str) -> Result<(), Untrusted> {
        if !self.hooks_active {
            return Ok(());
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
        assert_eq!(trust.can_use_tool(Some("t1"), "Bash"), Ok(()), "no hook: the old gate alone");
        trust.initialized(true);
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
}
