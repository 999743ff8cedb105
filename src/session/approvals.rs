//! Tool calls left to a person, decided without blocking the actor: the
//! prompts in flight (bounded, owned by the actor, ended with it), which
//! answers still count (only those for the process that asked), and what a
//! denial tells the agent.
//!
//! Invariants: at most [`MAX_ASKS`] prompts are in flight per session; beyond
//! that a call is denied at once with the reason; an answer that comes after
//! its process ended is dropped (generations); while a person is asked, the
//! turn is not hung.

use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinSet;

use crate::domain::{Approval, ApprovalAnswer, ApprovalRequest, GroupName};

/// Prompts one session may have in flight. The approvals channel is bounded
/// too (across sessions); this keeps one busy session from holding tasks
/// without end.
pub(super) const MAX_ASKS: usize = 8;

/// Who denied a call asked beyond [`MAX_ASKS`] (or when the channel is full).
pub(super) const TOO_MANY: &str = "pincer (too many approvals waiting)";

/// One `can_use_tool` request of one process.
#[derive(Debug)]
pub(super) struct Ask {
    pub(super) generation: u64,
    pub(super) request_id: String,
    pub(super) tool_name: String,
    pub(super) tool_use_id: Option<String>,
    pub(super) input: Value,
}

/// A person's answer (or the timeout) for one [`Ask`].
#[derive(Debug)]
pub(super) struct Answered {
    pub(super) ask: Ask,
    pub(super) answer: ApprovalAnswer,
}

fn unanswered(why: &str) -> ApprovalAnswer {
    ApprovalAnswer { verdict: Approval::Deny, by: why.to_owned() }
}

#[derive(Debug, Default)]
pub(super) struct Approvals {
    /// Asks of the current process still waiting for a person.
    waiting: usize,
    /// Prompts in flight; dropping the set (the actor ends) ends them.
    asks: JoinSet<Answered>,
}

impl Approvals {
    /// Whether a person is deciding for the current process.
    pub(super) fn asking(&self) -> bool {
        self.waiting > 0
    }

    /// Prompts in flight, of any process.
    #[cfg(test)]
    pub(super) fn in_flight(&self) -> usize {
        self.asks.len()
    }

    /// Hands `ask` to the admins through `approvals`; the answer (or a denial
    /// when nobody answers within `request.timeout`) comes from [`Approvals::next`].
    /// Past [`MAX_ASKS`] it is denied at once: that denial is returned, and
    /// the caller answers it now.
    pub(super) fn ask(
        &mut self,
        ask: Ask,
        request: ApprovalRequest,
        answer: tokio::sync::oneshot::Receiver<ApprovalAnswer>,
        approvals: &async_channel::Sender<ApprovalRequest>,
    ) -> Option<Answered> {
        let group = request.group.clone();
        if self.asks.len() >= MAX_ASKS {
            tracing::warn!(%group, in_flight = self.asks.len(), "too many approvals in flight; denying");
            return Some(Answered { ask, answer: unanswered(TOO_MANY) });
        }
        let timeout = request.timeout;
        if approvals.try_send(request).is_err() {
            tracing::warn!(%group, "too many approvals waiting; denying");
            return Some(Answered { ask, answer: unanswered(TOO_MANY) });
        }
        self.waiting += 1;
        self.asks.spawn(async move {
            let answer = match tokio::time::timeout(timeout, answer).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => unanswered("pincer (no channel could ask)"),
                Err(_) => unanswered("timeout"),
            };
            Answered { ask, answer }
        });
        None
    }

    /// The next answer. Pending forever while nothing is in flight (for `select!`).
    pub(super) async fn next(&mut self) -> Answered {
        loop {
            match self.asks.join_next().await {
                Some(Ok(answered)) => return answered,
                // The task only awaits a channel and a timer; it cannot fail but by abort.
                Some(Err(e)) => tracing::error!(%e, "an approval prompt ended without an answer"),
                None => std::future::pending().await,
            }
        }
    }

    /// Whether an answer still counts: it is for the live process (`live`).
    pub(super) fn accept(&mut self, answered: &Answered, live: Option<u64>) -> bool {
        if live != Some(answered.ask.generation) {
            return false;
        }
        self.waiting = self.waiting.saturating_sub(1);
        true
    }

    /// The process is gone: nobody decides for it any more (its prompts run
    /// out by their timeout, and their answers are dropped).
    pub(super) fn forget_process(&mut self) {
        self.waiting = 0;
    }
}

/// What the agent is told about a denial, in the chat's words.
pub(super) fn deny_reason(tool_name: &str, answer: &ApprovalAnswer, timeout: Duration) -> Option<String> {
    match (answer.verdict, answer.by.as_str()) {
        (Approval::Deny, "timeout") => Some(format!(
            "pincer: nobody approved `{tool_name}` within {}, so it was denied. Ask again, or have an admin allow it.",
            humantime::format_duration(timeout)
        )),
        (Approval::Deny, by) => Some(format!("pincer: the use of `{tool_name}` was denied ({by}).")),
        _ => None,
    }
}

/// The request a channel shows, and where its answer comes back.
pub(super) fn request(
    id: u64,
    group: &GroupName,
    ask: &Ask,
    timeout: Duration,
) -> (ApprovalRequest, tokio::sync::oneshot::Receiver<ApprovalAnswer>) {
    let (respond, answer) = tokio::sync::oneshot::channel();
    let request = ApprovalRequest {
        id,
        group: group.clone(),
        tool_name: ask.tool_name.clone(),
        summary: super::permission::summarize(&ask.tool_name, &ask.input),
        provenance: None,
        timeout,
        respond,
    };
    (request, answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn ask(generation: u64, n: usize) -> Ask {
        Ask {
            generation,
            request_id: format!("r{n}"),
            tool_name: "Bash".into(),
            tool_use_id: None,
            input: serde_json::json!({"command": "ls"}),
        }
    }

    fn group() -> GroupName {
        "team".parse().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn prompts_in_flight_are_bounded_and_the_rest_denied_at_once() {
        let (tx, rx) = async_channel::bounded(64);
        let mut approvals = Approvals::default();
        for n in 0..MAX_ASKS {
            let (request, answer) = request(n as u64, &group(), &ask(1, n), MINUTE);
            assert!(approvals.ask(ask(1, n), request, answer, &tx).is_none());
        }
        let (request, answer) = request(99, &group(), &ask(1, 99), MINUTE);
        let denied = approvals.ask(ask(1, 99), request, answer, &tx).expect("denied at once");
        assert_eq!((denied.answer.verdict, denied.answer.by.as_str()), (Approval::Deny, TOO_MANY));
        assert_eq!((approvals.in_flight(), rx.len()), (MAX_ASKS, MAX_ASKS), "the denied one was never shown");
        assert!(approvals.asking());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_prompt_is_denied_by_timeout_and_a_stale_answer_is_dropped() {
        let (tx, rx) = async_channel::bounded(4);
        let mut approvals = Approvals::default();
        let (request, answer) = request(1, &group(), &ask(1, 1), MINUTE);
        assert!(approvals.ask(ask(1, 1), request, answer, &tx).is_none());
        let shown = rx.recv().await.unwrap();
        let answered = approvals.next().await;
        drop(shown);
        assert_eq!(answered.answer.by, "timeout");
        assert!(!approvals.accept(&answered, Some(2)), "its process is gone");
        assert!(approvals.asking(), "a stale answer does not count down the new process");
        assert!(approvals.accept(&answered, Some(1)));
        assert!(!approvals.asking());
    }

    #[tokio::test(start_paused = true)]
    async fn prompts_end_with_their_owner() {
        let (tx, rx) = async_channel::bounded(4);
        let mut approvals = Approvals::default();
        let (request, answer) = request(1, &group(), &ask(1, 1), MINUTE);
        assert!(approvals.ask(ask(1, 1), request, answer, &tx).is_none());
        let shown = rx.recv().await.unwrap();
        drop(approvals);
        tokio::task::yield_now().await;
        assert!(shown.respond.is_closed(), "the prompt's task is gone, so nobody waits for the answer");
    }

    #[test]
    fn denials_say_who_denied_and_what_to_do() {
        let timeout = unanswered("timeout");
        let text = deny_reason("Bash", &timeout, MINUTE).unwrap();
        assert!(text.contains("nobody approved `Bash` within 1m"), "{text}");
        let by = deny_reason("Bash", &unanswered(TOO_MANY), MINUTE).unwrap();
        assert_eq!(by, "pincer: the use of `Bash` was denied (pincer (too many approvals waiting)).");
        let allowed = ApprovalAnswer { verdict: Approval::Allow, by: "ann".into() };
        assert_eq!(deny_reason("Bash", &allowed, MINUTE), None);
    }
}
