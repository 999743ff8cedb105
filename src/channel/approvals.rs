//! Routes each tool approval request to the platform its group lives on.
//!
//! Requests come from every session through one bounded queue; each goes to
//! the adapter of its group's chat (or the console, for a group without one),
//! never to whichever adapter reads first. A request no adapter can show is
//! denied: dropping it answers the session. An adapter shows at most
//! [`PROMPTS_IN_FLIGHT`] prompts at once ([`serve_asks`]); the next wait in
//! its queue, and past the queue's end are denied.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use super::{ApprovalAsk, Directory};
use crate::domain::{ApprovalRequest, Platform};
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
        let ask = ApprovalAsk { to, admins: group.settings.admins.clone(), request };
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
        (ApprovalAsk { to: ChatAddress::telegram(-1, None), admins: vec![], request }, answered)
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
