//! Routes each tool approval request to the platform its group lives on.
//!
//! Requests come from every session through one bounded queue; each goes to
//! the adapter of its group's chat (or the console, for a group without one),
//! never to whichever adapter reads first. A request no adapter can show is
//! denied: dropping it answers the session. An adapter shows at most
//! [`PROMPTS_IN_FLIGHT`] prompts at once ([`serve_asks`]); the next wait in
//! its queue, and past the queue's end are denied. How a shown prompt's
//! wait ends, and so whether its adapter may touch the prompt again, is
//! [`Ended`]'s.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

use super::{ApprovalAsk, Directory};
use crate::domain::{ApprovalAnswer, ApprovalRequest, Platform};
use crate::outbox::Outbox;

/// How many approval prompts may wait for one adapter.
pub const ASK_QUEUE: usize = 64;

/// The adapters that can ask, by platform.
#[derive(Default)]
pub struct Askers(HashMap<Platform, mpsc::Sender<ApprovalAsk>>);

impl Askers {
    /// Registers `platform`; its adapter reads the returned queue.
    pub fn register(&mut self, platform: Platform) -> mpsc::Receiver<ApprovalAsk> {
        let (tx, rx) = mpsc::channel(ASK_QUEUE);
        self.0.insert(platform, tx);
        rx
    }

    /// Sends `platform`'s requests to `to` from now on (a cluster node's
    /// store); the adapter's own queue, if it had one, is given back to keep open.
    pub fn divert(&mut self, platform: Platform, to: mpsc::Sender<ApprovalAsk>) -> Option<mpsc::Sender<ApprovalAsk>> {
        self.0.insert(platform, to)
    }
}

/// Hands each request to its group's adapter until the sessions are gone or `shutdown`.
pub async fn route(
    requests: async_channel::Receiver<ApprovalRequest>,
    askers: Askers,
    directory: Directory,
    outbox: Outbox,
    shutdown: CancellationToken,
) {
    loop {
        let request = tokio::select! {
            request = requests.recv() => match request { Ok(request) => request, Err(_) => return },
            _ = shutdown.cancelled() => return,
        };
        let group = match directory.group(&request.group).await {
            Ok(group) => group,
            Err(e) => {
                tracing::error!(group = %request.group, %e, "cannot look up the group of an approval request; denied");
                continue;
            }
        };
        let to = outbox.address_of(&group);
        let Some(asker) = askers.0.get(&to.platform) else {
            tracing::warn!(
                group = %group.name, tool = %request.tool_name, chat = %to,
                "no running channel can ask the group's admins; denied"
            );
            continue;
        };
        // One machine: nobody else could settle the prompt, so it is never withdrawn.
        let withdrawn = CancellationToken::new();
        let ask = ApprovalAsk { to, admins: group.settings.admins.clone(), request, withdrawn };
        // Never wait here: one platform that does not read (Telegram still
        // connecting) must not hold up the others' requests.
        match asker.try_send(ask) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(group = %group.name, "too many tool requests wait for the group's chat; denied")
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                tracing::warn!(group = %group.name, "the channel that asks the group's admins stopped; denied")
            }
        }
    }
}

/// How many prompts one adapter shows at once: each is a task that lives
/// until the prompt is answered or times out.
pub const PROMPTS_IN_FLIGHT: usize = ASK_QUEUE;

/// Runs `ask` on each request until `shutdown`, each in its own task, at
/// most [`PROMPTS_IN_FLIGHT`] at once.
pub async fn serve_asks<F, Fut>(mut asks: mpsc::Receiver<ApprovalAsk>, shutdown: CancellationToken, ask: F)
where
    F: Fn(ApprovalAsk) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(PROMPTS_IN_FLIGHT));
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = shutdown.cancelled() => return,
        };
        let next = tokio::select! {
            next = asks.recv() => match next { Some(next) => next, None => return },
            _ = shutdown.cancelled() => return,
        };
        let prompt = ask(next);
        tokio::spawn(async move {
            prompt.await;
            drop(slot);
        });
    }
}

/// How a shown prompt's wait ended, and so what its adapter does with it.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// An admin answered here: passed on to the session (`late`: it had
    /// stopped waiting just before, so the tool was denied).
    Answered { answer: ApprovalAnswer, late: bool },
    /// The session stopped waiting (its timeout, its turn ended): the prompt
    /// says it was denied.
    GaveUp,
    /// The adapter's own answer channel went (its entry dropped unanswered).
    Forgotten,
    /// Another node settles the prompt now (`ApprovalAsk::withdrawn`): the
    /// adapter forgets it and leaves its message as it is.
    Withdrawn,
}

/// Waits for the end of a shown prompt: `decided` carries an admin's answer
/// (passed on to `respond` here), `respond` closes when the session stops
/// waiting. A withdrawal is looked at first, so a gateway that lost its
/// lease never mistakes the end of its round for a timeout.
pub async fn wait_for_end(
    withdrawn: &CancellationToken,
    decided: oneshot::Receiver<ApprovalAnswer>,
    mut respond: oneshot::Sender<ApprovalAnswer>,
) -> Ended {
    let decided = tokio::select! {
        biased;
        () = withdrawn.cancelled() => return Ended::Withdrawn,
        answer = decided => answer,
        () = respond.closed() => return Ended::GaveUp,
    };
    match decided {
        Ok(answer) => {
            let late = respond.send(answer.clone()).is_err();
            Ended::Answered { answer, late }
        }
        Err(_) => Ended::Forgotten,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tokio::sync::{oneshot, Notify};

    use super::*;
    use crate::domain::{ApprovalRequest, ChatAddress};

    fn ask(id: u64) -> (ApprovalAsk, oneshot::Receiver<crate::domain::ApprovalAnswer>) {
        let (respond, answered) = oneshot::channel();
        let request = ApprovalRequest {
            id,
            group: "g".parse().unwrap(),
            tool_name: "Bash".into(),
            summary: "ls".into(),
            provenance: None,
            timeout: Duration::from_secs(60),
            respond,
        };
        let withdrawn = CancellationToken::new();
        (ApprovalAsk { to: ChatAddress::telegram(-1, None), admins: vec![], request, withdrawn }, answered)
    }

    fn alice() -> ApprovalAnswer {
        ApprovalAnswer { verdict: crate::domain::Approval::Allow, by: "telegram:42 (Alice)".into() }
    }

    #[tokio::test]
    async fn a_withdrawal_wins_over_the_end_of_the_wait_it_causes() {
        // A gateway whose round ends both withdraws the prompt and drops the
        // session's side: the prompt must read as withdrawn, not timed out.
        let (respond, answer) = oneshot::channel();
        let (_decide, decided) = oneshot::channel();
        let withdrawn = CancellationToken::new();
        withdrawn.cancel();
        drop(answer);
        let ended = wait_for_end(&withdrawn, decided, respond).await;
        assert_eq!(ended, Ended::Withdrawn);
    }

    #[tokio::test]
    async fn a_session_that_stops_waiting_is_a_timeout_and_an_answer_is_passed_on() {
        let (respond, answer) = oneshot::channel();
        let (_decide, decided) = oneshot::channel();
        drop(answer);
        let ended = wait_for_end(&CancellationToken::new(), decided, respond).await;
        assert_eq!(ended, Ended::GaveUp);

        let (respond, answer) = oneshot::channel();
        let (decide, decided) = oneshot::channel();
        decide.send(alice()).unwrap();
        let ended = wait_for_end(&CancellationToken::new(), decided, respond).await;
        assert_eq!(ended, Ended::Answered { answer: alice(), late: false });
        assert_eq!(answer.await.unwrap(), alice(), "passed on to the session");

        // Answered after the session stopped waiting: late, and denied.
        let (respond, answer) = oneshot::channel();
        let (decide, decided) = oneshot::channel();
        decide.send(alice()).unwrap();
        drop(answer);
        let ended = wait_for_end(&CancellationToken::new(), decided, respond).await;
        assert_eq!(ended, Ended::Answered { answer: alice(), late: true });
    }

    #[tokio::test(start_paused = true)]
    async fn prompts_in_flight_are_bounded_and_the_next_waits_for_a_free_slot() {
        let (tx, rx) = mpsc::channel(ASK_QUEUE * 2);
        let mut answers = Vec::new();
        for id in 0..(PROMPTS_IN_FLIGHT as u64 + 10) {
            let (a, answered) = ask(id);
            tx.try_send(a).unwrap();
            answers.push(answered);
        }
        let (shown, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let shutdown = CancellationToken::new();
        let serving = tokio::spawn(serve_asks(rx, shutdown.clone(), {
            let (shown, release) = (shown.clone(), release.clone());
            move |_ask| {
                let (shown, release) = (shown.clone(), release.clone());
                async move {
                    shown.fetch_add(1, Ordering::SeqCst);
                    // A prompt nobody answers, until released.
                    release.notified().await;
                }
            }
        }));
        while shown.load(Ordering::SeqCst) < PROMPTS_IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Paused time moves on only once every task waits, so the serving
        // loop has gone as far as it can: every slot taken, the rest queued.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(shown.load(Ordering::SeqCst), PROMPTS_IN_FLIGHT);
        release.notify_one();
        while shown.load(Ordering::SeqCst) < PROMPTS_IN_FLIGHT + 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        serving.await.unwrap();
        drop(answers);
    }
}
