//! Which calls a network fault hits, and for how long: pure rules the state
//! keeps and `faults` applies. Touches nothing.

use std::time::{Duration, Instant};

/// A fault of the network or of Telegram's front, set by [`FakeBot::outage`],
/// [`FakeBot::drop_connections`], [`FakeBot::hang_next`] and the like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NetFault {
    /// Answered with this 5xx status and the proxy's HTML page.
    Status(u16),
    /// The connection is closed without an answer.
    Drop,
    /// Not answered until released, then the connection is closed.
    Hang,
}

impl NetFault {
    /// The `error` of the recorded call.
    pub(super) fn describe(self) -> String {
        match self {
            NetFault::Status(code) => format!("fault: {code}"),
            NetFault::Drop => "fault: connection dropped".to_owned(),
            NetFault::Hang => "fault: hung".to_owned(),
        }
    }
}

/// Which calls a [`NetFault`] hits, and for how long.
#[derive(Debug)]
pub(super) struct FaultRule {
    pub(super) fault: NetFault,
    /// Lowercased method names; empty: every method.
    pub(super) methods: Vec<String>,
    /// The end of a window; `None`: until the calls are used up or it is ended.
    pub(super) until: Option<Instant>,
    /// How many calls it still hits; `None`: every call in the window.
    pub(super) calls_left: Option<u32>,
}

impl FaultRule {
    pub(super) fn window(fault: NetFault, methods: &[&str], window: Duration) -> FaultRule {
        let methods = methods.iter().map(|m| m.to_ascii_lowercase()).collect();
        FaultRule { fault, methods, until: Some(Instant::now() + window), calls_left: None }
    }

    pub(super) fn next_call(fault: NetFault, method: &str) -> FaultRule {
        FaultRule { fault, methods: vec![method.to_ascii_lowercase()], until: None, calls_left: Some(1) }
    }

    pub(super) fn is_over(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now >= until) || self.calls_left == Some(0)
    }

    pub(super) fn hits(&self, method: &str) -> bool {
        self.methods.is_empty() || self.methods.iter().any(|m| m.eq_ignore_ascii_case(method))
    }
}
