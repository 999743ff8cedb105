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
//! A file is sent beside its chat's text, in a task of its own (see
//! [`files`]): its upload may take as long as its size needs
//! ([`files::transfer_timeout`]), the rows behind it wait for it only
//! [`files::PATIENCE`], and after [`files::FILE_TRIES`] passing failures
//! over [`files::FILE_SPAN`] (or a refusal) its row is failed and the chat
//! told, in one transaction.
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
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Deliver, DeliveryError, Directory};
use crate::domain::media::OutboundFile;
use crate::domain::{ChatAddress, GroupName, Platform};
use crate::outbox::Outbox;
use crate::retry::RetryPolicy;
use crate::store::{Marked, OutboxId, OutboxRow, Seen, StoreError};
use files::{FileTries, Lineup, Read};

/// How often the outbox is read again without being woken: catches rows
/// written by another process, and a chat whose group came back.
const RESCAN: Duration = Duration::from_secs(5);

pub mod files;

pub use files::SEND_TIMEOUT;

/// How long a chat's worker waits for work before it offers to end.
const IDLE: Duration = Duration::from_secs(60);

/// Which of a chat's queued rows a read takes (the oldest of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    Any,
    /// Rows without a file.
    Texts,
    /// Rows with a file.
    Files,
}

/// Where delivery reads its work and records its progress: the outbox and the
/// group directory in pincer, a fake in the unit tests.
pub trait Ledger: Clone + Send + Sync + 'static {
    fn waiting_chats(&self, platform: Platform) -> impl Future<Output = Result<Vec<ChatAddress>, StoreError>> + Send;
    fn next(&self, to: &ChatAddress, pick: Pick) -> impl Future<Output = Result<Option<OutboxRow>, StoreError>> + Send;
    // Each mark changes the row only while it is as `seen` (see `store::Marked`).
    fn parts_done(&self, seen: &Seen, parts: u32) -> impl Future<Output = Result<Marked, StoreError>> + Send;
    fn delivered(&self, seen: &Seen, parts: u32) -> impl Future<Output = Result<Marked, StoreError>> + Send;
    fn attempt_failed(&self, seen: &Seen, why: &str) -> impl Future<Output = Result<Marked, StoreError>> + Send;
    fn failed(&self, seen: &Seen, why: &str) -> impl Future<Output = Result<Marked, StoreError>> + Send;
    /// The row's file could not be sent: failed, and `notice` queued for
    /// `group`'s chat, together.
    fn file_failed(
        &self,
        group: &GroupName,
        seen: &Seen,
        why: &str,
        notice: &str,
    ) -> impl Future<Output = Result<Marked, StoreError>> + Send;
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
    async fn next(&self, to: &ChatAddress, pick: Pick) -> Result<Option<OutboxRow>, StoreError> {
        match pick {
            Pick::Any => self.outbox.next(to).await,
            Pick::Texts => self.outbox.next_text(to).await,
            Pick::Files => self.outbox.next_file(to).await,
        }
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
    async fn file_failed(&self, group: &GroupName, seen: &Seen, why: &str, notice: &str) -> Result<Marked, StoreError> {
        self.outbox.file_failed(group, seen, why, notice).await
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

/// A row's failed tries so far.
#[derive(Clone, Copy, Debug, Default)]
struct Tries {
    /// Passing failures in a row, for the pause before the next try.
    in_a_row: u32,
    /// Failed uploads of its file, toward [`files::FILE_TRIES`].
    file: FileTries,
}

/// Delivers one chat's rows, in order (a file beside them, see [`files`]).
struct Worker<D, L> {
    adapter: Arc<D>,
    ledger: L,
    policy: RetryPolicy,
    stop: CancellationToken,
    to: ChatAddress,
}

impl<D, L: Clone> Clone for Worker<D, L> {
    fn clone(&self) -> Self {
        Worker {
            adapter: self.adapter.clone(),
            ledger: self.ledger.clone(),
            policy: self.policy,
            stop: self.stop.clone(),
            to: self.to.clone(),
        }
    }
}

/// What a chat's worker reads next.
enum Next {
    Read(Pick),
    /// A wait for the file ended: look at the lineup again.
    LookAgain,
    Stop,
}

/// The part of a row whose send failed.
#[derive(Clone, Copy)]
struct Part<'a> {
    row: &'a OutboxRow,
    /// The row as last recorded.
    seen: &'a Seen,
    /// Its file, when this part is the file.
    file: Option<&'a OutboundFile>,
    /// Which part (from 1), of how many.
    number: u32,
    of: u32,
}

/// The task sending the chat's file row, if one is on its way.
type FileTask = Option<JoinHandle<Flow>>;

/// How the file task ended; never, when there is none.
async fn file_sent(task: &mut FileTask) -> Flow {
    let Some(running) = task.as_mut() else {
        return std::future::pending().await;
    };
    let flow = running.await.unwrap_or_else(|e| {
        // Its row stays queued and is read again.
        tracing::error!(%e, "a file's delivery task failed");
        Flow::Next
    });
    *task = None;
    flow
}

impl<D: Deliver, L: Ledger> Worker<D, L> {
    async fn run(self, duty: Arc<Duty>) {
        let mut lineup = Lineup::default();
        let mut file: FileTask = None;
        loop {
            tokio::select! {
                _ = duty.wake.notified() => {}
                flow = file_sent(&mut file) => {
                    lineup.ended();
                    if flow == Flow::Stop {
                        return;
                    }
                }
                // Never idle with a file on its way: its chat is not done.
                _ = tokio::time::sleep(IDLE), if file.is_none() => {
                    duty.idle();
                    continue;
                }
                _ = self.stop.cancelled() => break,
            }
            if !duty.take_up() || self.drain(&mut lineup, &mut file).await == Flow::Stop {
                break;
            }
        }
        // A file task stops by itself at `stop`, leaving its row queued.
        if file.is_some() {
            file_sent(&mut file).await;
        }
    }

    /// Delivers rows until none is left that may go now (or the chat pauses).
    async fn drain(&self, lineup: &mut Lineup, file: &mut FileTask) -> Flow {
        let mut store_failures = 0;
        // Passing send failures of the text row being retried, for its backoff.
        let mut failures: Option<(OutboxId, Tries)> = None;
        loop {
            let pick = match self.pick(lineup, file).await {
                Next::Read(pick) => pick,
                Next::LookAgain => continue,
                Next::Stop => return Flow::Stop,
            };
            let row = match self.ledger.next(&self.to, pick).await {
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
            if row.file.is_some() {
                // Only read with `Pick::Any`, so no other file is on its way.
                lineup.begun(row.id, Instant::now());
                *file = Some(tokio::spawn(self.clone().send_file(row)));
                continue;
            }
            let mut tries = match failures {
                Some((id, tries)) if id == row.id => tries,
                _ => Tries::default(),
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

    /// Which rows may be read now, with the chat's file perhaps on its way:
    /// any, only texts, or none until the file lands or its patience ends.
    async fn pick(&self, lineup: &mut Lineup, file: &mut FileTask) -> Next {
        if file.as_ref().is_some_and(JoinHandle::is_finished) {
            lineup.ended();
            if file_sent(file).await == Flow::Stop {
                return Next::Stop;
            }
        }
        match lineup.read(Instant::now()) {
            Read::Any => Next::Read(Pick::Any),
            Read::Texts => Next::Read(Pick::Texts),
            Read::AwaitFile { until } => {
                tokio::select! {
                    flow = file_sent(file) => {
                        lineup.ended();
                        if flow == Flow::Stop {
                            return Next::Stop;
                        }
                    }
                    _ = tokio::time::sleep_until(until) => {}
                    _ = self.stop.cancelled() => return Next::Stop,
                }
                Next::LookAgain
            }
        }
    }

    /// Sends a row with a file, in its own task beside the chat's text: tried
    /// again after passing failures until it lands, is failed (refused, or
    /// out of tries), or leaves the chat.
    async fn send_file(self, mut row: OutboxRow) -> Flow {
        let id = row.id;
        let mut tries = Tries::default();
        loop {
            match self.deliver(row, &mut tries).await {
                Flow::Retry(pause) => {
                    if !self.nap(pause).await {
                        return Flow::Stop;
                    }
                }
                other => return other,
            }
            // Read again: it may have been rebound, moved or settled meanwhile.
            row = match self.record(|| self.ledger.next(&self.to, Pick::Files)).await {
                Some(Some(again)) if again.id == id => again,
                // Gone from here: the chat's worker reads whatever is next.
                Some(_) => return Flow::Next,
                None => return Flow::Stop,
            };
        }
    }

    /// Sends the row's parts that are not in the chat yet. Every mark is
    /// guarded by what was read; when one finds the row moved (rebound to
    /// another chat while a part was on its way), the row is dropped here: the
    /// worker of its new address sends it (from its first part when rebound).
    async fn deliver(&self, row: OutboxRow, tries: &mut Tries) -> Flow {
        let parts = self.adapter.parts(row.kind, &row.text, row.file.as_ref());
        let total = u32::try_from(parts.len()).unwrap_or(u32::MAX);
        let mut seen = row.seen();
        let mut done = row.parts_done.min(total);
        while let Some(part) = parts.get(done as usize) {
            // A row's file is its first part (`Deliver::parts`).
            let file = row.file.as_ref().filter(|_| done == 0);
            let Some(sent) = self.send_part(&row.to, part, file).await else {
                return Flow::Stop;
            };
            if let Err(error) = sent {
                let at = Part { row: &row, seen: &seen, file, number: done + 1, of: total };
                return self.part_failed(at, error, tries).await;
            }
            done += 1;
            tries.in_a_row = 0;
            if done < total {
                match self.record(|| self.ledger.parts_done(&seen, done)).await {
                    Some(Marked::Recorded) => seen.parts_done = done,
                    Some(Marked::Moved) => return self.moved(&row, "a part was sent"),
                    None => return Flow::Stop,
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

    /// Sends one part, within its time (a file's by its size); `None` when
    /// stopped first.
    async fn send_part(
        &self,
        to: &ChatAddress,
        part: &D::Part,
        file: Option<&OutboundFile>,
    ) -> Option<Result<(), DeliveryError>> {
        let limit = file.map_or(SEND_TIMEOUT, |file| files::transfer_timeout(file.bytes));
        tokio::select! {
            sent = tokio::time::timeout(limit, self.adapter.send(to, part)) => Some(sent.unwrap_or_else(|_| {
                Err(DeliveryError::transient(format!(
                    "no answer from the chat's platform within {}",
                    humantime::format_duration(limit)
                )))
            })),
            _ = self.stop.cancelled() => None,
        }
    }

    /// A part did not land: what becomes of its row, by why.
    async fn part_failed(&self, at: Part<'_>, error: DeliveryError, tries: &mut Tries) -> Flow {
        let Part { row, seen, file, .. } = at;
        match error {
            DeliveryError::Transient { why, retry_after } => self.passing_failure(at, &why, retry_after, tries).await,
            DeliveryError::ChatGone(why) => {
                counters().delivery_failure(D::PLATFORM.as_str(), "chat_gone");
                // Only a row still waiting here says this chat is the group's:
                // a rebound group must not be paused for its old chat.
                if let Ok(Marked::Moved) = self.ledger.attempt_failed(seen, &why).await {
                    return self.moved(row, "its old chat was lost");
                }
                tracing::warn!(chat = %self.to, group = %row.group, %why, "the bot lost the group's chat; its replies wait until it is back");
                if let Err(e) = self.ledger.chat_gone(&row.group, &why).await {
                    tracing::error!(group = %row.group, %e, "cannot mark the group inactive");
                }
                Flow::Pause
            }
            DeliveryError::Moved(to) => {
                tracing::info!(from = %self.to, %to, group = %row.group, "the chat moved; its replies follow");
                if self.record(|| self.ledger.chat_moved(&self.to, &to)).await.is_none() {
                    return Flow::Stop;
                }
                Flow::Pause
            }
            DeliveryError::Rejected(why) => {
                counters().delivery_failure(D::PLATFORM.as_str(), "rejected");
                if let Some(file) = file {
                    let notice = files::refused(file, &why);
                    return self.give_up_file(row, seen, &why, &notice).await;
                }
                match self.record(|| self.ledger.failed(seen, &why)).await {
                    Some(Marked::Recorded) => {
                        let_go(row);
                        tracing::error!(chat = %self.to, group = %row.group, %why, "the chat refused a message for good; it is marked failed");
                        Flow::Next
                    }
                    Some(Marked::Moved) => self.moved(row, "its old chat refused it"),
                    None => Flow::Stop,
                }
            }
        }
    }

    /// A passing failure: tried again after a pause, unless it is a file
    /// that has run out of tries.
    async fn passing_failure(&self, at: Part<'_>, why: &str, retry_after: Option<Duration>, tries: &mut Tries) -> Flow {
        let Part { row, seen, file, number, of } = at;
        counters().delivery_failure(D::PLATFORM.as_str(), "transient");
        tries.in_a_row += 1;
        if let Some(file) = file.filter(|_| tries.file.failed(Instant::now(), retry_after.is_some())) {
            let notice = files::given_up(D::PLATFORM, file, tries.file.counted());
            let why = format!("not sent after {} tries; the last: {why}", tries.file.counted());
            return self.give_up_file(row, seen, &why, &notice).await;
        }
        let pause = self.policy.pause(tries.in_a_row, retry_after);
        tracing::warn!(
            chat = %self.to, group = %row.group, part = number, parts = of, failures = tries.in_a_row,
            %why, "sending to the chat failed; trying again in {}", humantime::format_duration(pause)
        );
        match self.ledger.attempt_failed(seen, why).await {
            Ok(Marked::Recorded) => {}
            Ok(Marked::Moved) => return self.moved(row, "a try failed"),
            Err(e) => tracing::error!(chat = %self.to, %e, "cannot record a failed delivery"),
        }
        Flow::Retry(pause)
    }

    /// The row's file will not reach the chat: the row is failed and the
    /// chat told, in one write.
    async fn give_up_file(&self, row: &OutboxRow, seen: &Seen, why: &str, notice: &str) -> Flow {
        match self.record(|| self.ledger.file_failed(&row.group, seen, why, notice)).await {
            Some(Marked::Recorded) => {
                let_go(row);
                tracing::error!(chat = %self.to, group = %row.group, %why, "a file could not be sent; it is marked failed and the chat told");
                Flow::Next
            }
            Some(Marked::Moved) => self.moved(row, "its file failed"),
            None => Flow::Stop,
        }
    }

    /// The row left this chat while it was being sent: dropped here.
    fn moved(&self, row: &OutboxRow, when: &str) -> Flow {
        tracing::info!(chat = %self.to, group = %row.group, row = row.id.0, "the reply left this chat (rebound or moved) after {when}; the worker of its new address sends it");
        Flow::Next
    }

    /// Reads or records in the outbox, trying until the store answers: a
    /// part counted as not sent would be sent again. `None` when stopped first.
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
                    tracing::error!(chat = %self.to, %e, "cannot read or record a delivery in the outbox; trying again");
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
