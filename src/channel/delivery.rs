//! Delivery: drains a platform's outbox into its chats.
//!
//! One worker per chat sends that chat's rows oldest first, part by part,
//! recording each part as it lands, so a restart goes on after the last part
//! that reached the chat and never sends one twice (the one exception: pincer
//! dies after the platform took a part and before it was recorded).
//! A group rebound to another chat mid-delivery: its row goes whole to the
//! new chat, and the old chat gets no part after the one on its way then
//! (every mark is guarded by the row as read; a retry reads it again).
//! Chats do not wait for each other. Passing failures (a send unanswered
//! after [`SEND_TIMEOUT`] is one) are retried for as long as they last
//! ([`RetryPolicy`]); a chat that is gone pauses its group; a
//! message the platform refuses for good is marked failed and the next goes on.
//!
//! Work is found in the store, not in memory: the workers are woken when
//! something is written and rescan now and then, so rows left by a previous
//! pincer (even one killed mid-send) are delivered too.
//!
//! A worker with nothing to do for [`IDLE`] offers to end; the loop that owns
//! the workers ends it at its next scan if its chat still has nothing waiting.
//! Whether it goes on or ends is one atomic step ([`Duty`]), so a worker never
//! ends with a wake-up in hand, and never sends while another has its chat.

use crate::metrics::counters::counters;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Deliver, DeliveryError, Directory};
use crate::domain::{ChatAddress, GroupName, Platform};
use crate::outbox::Outbox;
use crate::retry::RetryPolicy;
use crate::store::{Marked, OutboxId, OutboxRow, Seen, StoreError};

/// How often the outbox is read again without being woken: catches rows
/// written by another process, and a chat whose group came back.
const RESCAN: Duration = Duration::from_secs(5);

/// How long one part's send may take. A send that has not answered by then
/// (a stalled connection, a WhatsApp socket that never acks) counts as a
/// passing failure and is retried, so one stuck request cannot hold its chat
/// forever. Generous, because a part that did land but answered later than
/// this is sent again.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a chat's worker waits for work before it offers to end.
const IDLE: Duration = Duration::from_secs(60);

/// Where delivery reads its work and records its progress: the outbox and the
/// group directory in pincer, a fake in the unit tests.
pub trait Ledger: Clone + Send + Sync + 'static {
    fn waiting_chats(&self, platform: Platform) -> impl Future<Output = Result<Vec<ChatAddress>, StoreError>> + Send;
    fn next(&self, to: &ChatAddress) -> impl Future<Output = Result<Option<OutboxRow>, StoreError>> + Send;
    // Each mark changes the row only while it is as `seen` (see `store::Marked`).
    fn parts_done(&self, seen: &Seen, parts: u32) -> impl Future<Output = Result<Marked, StoreError>> + Send;
    fn delivered(&self, seen: &Seen, parts: u32) -> impl Future<Output = Result<Marked, StoreError>> + Send;
    fn attempt_failed(&self, seen: &Seen, why: &str) -> impl Future<Output = Result<Marked, StoreError>> + Send;
    fn failed(&self, seen: &Seen, why: &str) -> impl Future<Output = Result<Marked, StoreError>> + Send;
    fn chat_gone(&self, group: &GroupName, why: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    fn chat_moved(&self, from: &ChatAddress, to: &ChatAddress) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Changes when there may be new work.
    fn subscribe(&self) -> watch::Receiver<u64>;
}

/// The real ledger: the store's outbox and group directory.
#[derive(Clone, Debug)]
pub struct OutboxLedger {
    pub outbox: Outbox,
    pub directory: Directory,
}

impl Ledger for OutboxLedger {
    async fn waiting_chats(&self, platform: Platform) -> Result<Vec<ChatAddress>, StoreError> {
        self.outbox.waiting_chats(platform).await
    }
    async fn next(&self, to: &ChatAddress) -> Result<Option<OutboxRow>, StoreError> {
        self.outbox.next(to).await
    }
    async fn parts_done(&self, seen: &Seen, parts: u32) -> Result<Marked, StoreError> {
        self.outbox.parts_done(seen, parts).await
    }
    async fn delivered(&self, seen: &Seen, parts: u32) -> Result<Marked, StoreError> {
        self.outbox.delivered(seen, parts).await
    }
    async fn attempt_failed(&self, seen: &Seen, why: &str) -> Result<Marked, StoreError> {
        self.outbox.attempt_failed(seen, why).await
    }
    async fn failed(&self, seen: &Seen, why: &str) -> Result<Marked, StoreError> {
        self.outbox.failed(seen, why).await
    }
    async fn chat_gone(&self, group: &GroupName, why: &str) -> Result<(), StoreError> {
        self.directory.set_reachable(group, false, Some(why)).await
    }
    async fn chat_moved(&self, from: &ChatAddress, to: &ChatAddress) -> Result<(), StoreError> {
        self.directory.chat_moved(from.platform, &from.chat, &to.chat).await
    }
    fn subscribe(&self) -> watch::Receiver<u64> {
        self.outbox.subscribe()
    }
}

/// Delivers `D::PLATFORM`'s outbox until `stop`. A send in flight when
/// `stop` comes is abandoned; its row stays queued for the next run.
pub async fn run<D: Deliver, L: Ledger>(adapter: Arc<D>, ledger: L, policy: RetryPolicy, stop: CancellationToken) {
    let mut written = ledger.subscribe();
    let mut workers: HashMap<ChatAddress, Arc<Duty>> = HashMap::new();
    let tracker = TaskTracker::new();
    loop {
        match ledger.waiting_chats(D::PLATFORM).await {
            Ok(chats) => {
                let waiting: HashSet<&ChatAddress> = chats.iter().collect();
                // Only chats with nothing waiting: a worker is never ended and woken in one scan.
                workers.retain(|chat, duty| waiting.contains(chat) || !duty.end());
                for chat in &chats {
                    let duty = workers.entry(chat.clone()).or_insert_with(|| {
                        let duty = Arc::new(Duty::default());
                        let worker = Worker {
                            adapter: adapter.clone(),
                            ledger: ledger.clone(),
                            policy,
                            stop: stop.clone(),
                            to: chat.clone(),
                        };
                        tracker.spawn(worker.run(duty.clone()));
                        duty
                    });
                    // Stores a permit when the worker is busy: it looks again when done.
                    duty.wake.notify_one();
                }
            }
            Err(e) => tracing::error!(platform = %D::PLATFORM, %e, "cannot read the outbox; trying again"),
        }
        tokio::select! {
            changed = written.changed() => if changed.is_err() { written = ledger.subscribe() },
            _ = tokio::time::sleep(RESCAN) => {}
            _ = stop.cancelled() => break,
        }
    }
    tracker.close();
    tracker.wait().await;
}

/// A worker's wake-up and whether it may end. The worker marks itself idle
/// after [`IDLE`] without work; the loop that owns the workers ends an idle
/// one ([`Duty::end`]) and a wake-up takes it back to work
/// ([`Duty::take_up`]): each is one compare-and-swap, so exactly one wins.
#[derive(Default)]
struct Duty {
    wake: Notify,
    state: AtomicU8,
}

const BUSY: u8 = 0;
const IDLE_NOW: u8 = 1;
const ENDED: u8 = 2;

impl Duty {
    /// Ends the worker if it is idle (it leaves at once); false when it is busy.
    fn end(&self) -> bool {
        let ended = self.state.compare_exchange(IDLE_NOW, ENDED, Ordering::SeqCst, Ordering::SeqCst).is_ok();
        if ended {
            self.wake.notify_one();
        }
        ended
    }

    /// The worker was woken: back to work, or false when it was ended.
    fn take_up(&self) -> bool {
        self.state.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| (s != ENDED).then_some(BUSY)).is_ok()
    }

    /// Nothing to do for a while: the worker may be ended.
    fn idle(&self) {
        let _ = self.state.compare_exchange(BUSY, IDLE_NOW, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// What became of a row.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    /// Done with it (delivered, failed for good, or moved away): on to the next.
    Next,
    /// A passing failure: read the row again after this pause, then go on
    /// from the parts recorded (it may have moved meanwhile).
    Retry(Duration),
    /// The chat is gone or moved: wait to be woken.
    Pause,
    Stop,
}

/// Delivers one chat's rows, in order.
struct Worker<D, L> {
    adapter: Arc<D>,
    ledger: L,
    policy: RetryPolicy,
    stop: CancellationToken,
    to: ChatAddress,
}

impl<D: Deliver, L: Ledger> Worker<D, L> {
    async fn run(self, duty: Arc<Duty>) {
        loop {
            tokio::select! {
                _ = duty.wake.notified() => {}
                _ = tokio::time::sleep(IDLE) => {
                    duty.idle();
                    continue;
                }
                _ = self.stop.cancelled() => return,
            }
            if !duty.take_up() || self.drain().await == Flow::Stop {
                return;
            }
        }
    }

    /// Delivers rows until none is left (or the chat pauses).
    async fn drain(&self) -> Flow {
        let mut store_failures = 0;
        // Passing send failures of the row being retried, for its backoff.
        let mut failures: Option<(OutboxId, u32)> = None;
        loop {
            let row = match self.ledger.next(&self.to).await {
                Ok(Some(row)) => row,
                Ok(None) => return Flow::Pause,
                Err(e) => {
                    store_failures += 1;
                    tracing::error!(chat = %self.to, %e, "cannot read the outbox; trying again");
                    if !self.nap(self.policy.pause(store_failures, None)).await {
                        return Flow::Stop;
                    }
                    continue;
                }
            };
            store_failures = 0;
            let mut tries = match failures {
                Some((id, n)) if id == row.id => n,
                _ => 0,
            };
            let id = row.id;
            match self.deliver(row, &mut tries).await {
                Flow::Next => {}
                Flow::Retry(pause) => {
                    failures = Some((id, tries));
                    if !self.nap(pause).await {
                        return Flow::Stop;
                    }
                }
                other => return other,
            }
        }
    }

    /// Sends the row's parts that are not in the chat yet. Every mark is
    /// guarded by what was read; when one finds the row moved (rebound to
    /// another chat while a part was on its way), the row is dropped here: the
    /// worker of its new address sends it (from its first part when rebound).
    async fn deliver(&self, row: OutboxRow, failures: &mut u32) -> Flow {
        let parts = self.adapter.parts(row.kind, &row.text, row.file.as_ref());
        let total = u32::try_from(parts.len()).unwrap_or(u32::MAX);
        let mut seen = row.seen();
        let mut done = row.parts_done.min(total);
        while let Some(part) = parts.get(done as usize) {
            let sent = tokio::select! {
                sent = tokio::time::timeout(SEND_TIMEOUT, self.adapter.send(&row.to, part)) => sent.unwrap_or_else(|_| {
                    Err(DeliveryError::transient(format!(
                        "no answer from the chat's platform within {}",
                        humantime::format_duration(SEND_TIMEOUT)
                    )))
                }),
                _ = self.stop.cancelled() => return Flow::Stop,
            };
            match sent {
                Ok(()) => {
                    done += 1;
                    *failures = 0;
                    if done < total {
                        match self.record(|| self.ledger.parts_done(&seen, done)).await {
                            Some(Marked::Recorded) => seen.parts_done = done,
                            Some(Marked::Moved) => return self.moved(&row, "a part was sent"),
                            None => return Flow::Stop,
                        }
                    }
                }
                Err(DeliveryError::Transient { why, retry_after }) => {
                    counters().delivery_failure(D::PLATFORM.as_str(), "transient");
                    *failures += 1;
                    let pause = self.policy.pause(*failures, retry_after);
                    tracing::warn!(
                        chat = %self.to, group = %row.group, part = done + 1, parts = total, failures = *failures,
                        %why, "sending to the chat failed; trying again in {}", humantime::format_duration(pause)
                    );
                    match self.ledger.attempt_failed(&seen, &why).await {
                        Ok(Marked::Recorded) => {}
                        Ok(Marked::Moved) => return self.moved(&row, "a try failed"),
                        Err(e) => tracing::error!(chat = %self.to, %e, "cannot record a failed delivery"),
                    }
                    return Flow::Retry(pause);
                }
                Err(DeliveryError::ChatGone(why)) => {
                    counters().delivery_failure(D::PLATFORM.as_str(), "chat_gone");
                    // Only a row still waiting here says this chat is the group's:
                    // a rebound group must not be paused for its old chat.
                    if let Ok(Marked::Moved) = self.ledger.attempt_failed(&seen, &why).await {
                        return self.moved(&row, "its old chat was lost");
                    }
                    tracing::warn!(chat = %self.to, group = %row.group, %why, "the bot lost the group's chat; its replies wait until it is back");
                    if let Err(e) = self.ledger.chat_gone(&row.group, &why).await {
                        tracing::error!(group = %row.group, %e, "cannot mark the group inactive");
                    }
                    return Flow::Pause;
                }
                Err(DeliveryError::Moved(to)) => {
                    tracing::info!(from = %self.to, %to, group = %row.group, "the chat moved; its replies follow");
                    if self.record(|| self.ledger.chat_moved(&self.to, &to)).await.is_none() {
                        return Flow::Stop;
                    }
                    return Flow::Pause;
                }
                Err(DeliveryError::Rejected(why)) => {
                    counters().delivery_failure(D::PLATFORM.as_str(), "rejected");
                    return match self.record(|| self.ledger.failed(&seen, &why)).await {
                        Some(Marked::Recorded) => {
                            let_go(&row);
                            tracing::error!(chat = %self.to, group = %row.group, %why, "the chat refused a message for good; it is marked failed");
                            Flow::Next
                        }
                        Some(Marked::Moved) => self.moved(&row, "its old chat refused it"),
                        None => Flow::Stop,
                    };
                }
            }
        }
        match self.record(|| self.ledger.delivered(&seen, total)).await {
            Some(Marked::Recorded) => let_go(&row),
            Some(Marked::Moved) => return self.moved(&row, "it was sent whole"),
            None => return Flow::Stop,
        }
        if row.attempts > 0 {
            tracing::info!(chat = %self.to, group = %row.group, "delivered after earlier failures");
        }
        Flow::Next
    }

    /// The row left this chat while it was being sent: dropped here.
    fn moved(&self, row: &OutboxRow, when: &str) -> Flow {
        tracing::info!(chat = %self.to, group = %row.group, row = row.id.0, "the reply left this chat (rebound or moved) after {when}; the worker of its new address sends it");
        Flow::Next
    }

    /// Records progress, trying until the store takes it: a part counted as
    /// not sent would be sent again. `None` when stopped first.
    async fn record<T, F, Fut>(&self, write: F) -> Option<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut failures = 0;
        loop {
            match write().await {
                Ok(done) => return Some(done),
                Err(e) => {
                    failures += 1;
                    tracing::error!(chat = %self.to, %e, "cannot record a delivery; trying again");
                    if !self.nap(self.policy.pause(failures, None)).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Sleeps; false when stopped first.
    async fn nap(&self, pause: Duration) -> bool {
        crate::retry::nap(pause, &self.stop).await
    }
}

/// A settled row's file copy is no longer needed (the sweep at the next
/// start removes one left by a pincer stopped before this ran).
pub(crate) fn let_go(row: &OutboxRow) {
    if let Some(file) = row.file.clone() {
        tokio::task::spawn_blocking(move || crate::media::outgoing::forget(&file));
    }
}

#[cfg(test)]
mod tests;
