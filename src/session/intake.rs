//! How messages reach a session: through the store, never through memory.
//!
//! The router stores a message `queued` and wakes the group's session; the
//! session pulls its group's queued rows, oldest first, when it can take them
//! (at most [`TAKEN_AT_ONCE`] unanswered at a time). A sender therefore never
//! waits for a session, however busy: a backlog waits in SQLite, delays no
//! other chat, and survives a restart as it is (a restart's recovery puts
//! what was written back in the queue and wakes the session, the same path).
//!
//! A session with nothing to do for a while retires (its actor ends, its
//! router entry goes); a wake or a watched message that meets a retired
//! intake is refused, and the router starts a fresh actor, whose first pull
//! finds the message. Retiring and waking exclude each other (one lock), and
//! no actor retires while a watched message is being registered, so no
//! message is left in a queue nobody reads and a group never has two actors.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::sync::{oneshot, Notify};

use super::TurnOutcome;
use crate::domain::media::ModelImage;
use crate::domain::{GroupName, Inbound, InboundId, Missed};
use crate::store::{Queue, StoreError, TakenContext};

/// At most this many messages of one group are taken from the queue and not
/// yet answered; the rest wait in the store until results settle some.
pub(super) const TAKEN_AT_ONCE: usize = 32;

/// At most this many missed chat messages are handed to the agent as context.
const CONTEXT_LIMIT: usize = 50;

/// What the router and a group's session actor share about its queue.
#[derive(Debug, Default)]
pub(super) struct Intake {
    wake: Notify,
    /// Wakes the actor has not yet answered with a pull that emptied the
    /// queue: while any is owed, the session counts as busy.
    wakes: AtomicUsize,
    /// Who waits to hear how the turn answering a message ended.
    watchers: Mutex<HashMap<InboundId, oneshot::Sender<TurnOutcome>>>,
    /// Held while a watched message is stored and its watcher registered,
    /// and while the actor pulls, so no message is taken before its watcher
    /// is there to be told.
    registering: tokio::sync::Mutex<()>,
    /// Whether the actor retired; taken with every wake.
    retired: Mutex<bool>,
}

impl Intake {
    /// Something was queued for this group: the actor pulls when it can.
    /// False when the actor retired: nobody reads this queue any more.
    pub(super) fn wake(&self) -> bool {
        let retired = self.lock_retired();
        if *retired {
            return false;
        }
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_one();
        true
    }

    /// The actor asks to retire: granted unless a wake is owed or a watched
    /// message is being registered. Once granted, every wake is refused.
    pub(super) fn retire(&self) -> bool {
        let Ok(_registering) = self.registering.try_lock() else {
            return false;
        };
        let mut retired = self.lock_retired();
        if self.wakes() > 0 {
            return false;
        }
        *retired = true;
        true
    }

    pub(super) fn is_retired(&self) -> bool {
        *self.lock_retired()
    }

    fn lock_retired(&self) -> std::sync::MutexGuard<'_, bool> {
        // Held only for a flag and a counter, never across an await.
        self.retired.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves at the next wake (one sent meanwhile is kept, not lost).
    pub(super) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// How many wakes are outstanding right now.
    pub(super) fn wakes(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }

    /// The actor answered `n` wakes with a pull that found the queue empty.
    pub(super) fn acknowledge(&self, n: usize) {
        self.wakes.fetch_sub(n, Ordering::SeqCst);
    }

    /// Holds pulls (and retiring) back until the guard is dropped. None when
    /// the actor already retired.
    pub(super) async fn hold_pulls(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        let held = self.registering.lock().await;
        (!self.is_retired()).then_some(held)
    }

    pub(super) fn watch(&self, id: InboundId, done: oneshot::Sender<TurnOutcome>) {
        self.lock_watchers().insert(id, done);
    }

    pub(super) fn is_watched(&self, id: InboundId) -> bool {
        self.lock_watchers().contains_key(&id)
    }

    /// Tells whoever waits on these messages how their turn ended.
    pub(super) fn tell(&self, ids: &[InboundId], outcome: &TurnOutcome) {
        let mut watchers = self.lock_watchers();
        for id in ids {
            if let Some(done) = watchers.remove(id) {
                // The waiter may have given up (pincer stopping); nothing to tell then.
                let _ = done.send(outcome.clone());
            }
        }
    }

    fn lock_watchers(&self) -> std::sync::MutexGuard<'_, HashMap<InboundId, oneshot::Sender<TurnOutcome>>> {
        // Held only for a map operation, never across an await.
        self.watchers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A message the session took from the queue, with the chat context before it.
pub(super) struct Taken {
    pub id: InboundId,
    pub msg: Inbound,
    pub missed: Missed,
    /// Shown to the model with it.
    pub images: Vec<ModelImage>,
}

/// The actor's place in its group's queue.
#[derive(Debug)]
pub(super) struct Puller {
    /// The newest row taken: the next pull starts after it.
    after: InboundId,
    /// The queue may hold more than the last pull took (or a wake came).
    more: bool,
    /// Wakes seen since the queue was last found empty.
    owed: usize,
    /// A throwaway session's: it never looks at the queue.
    idle: bool,
}

impl Default for Puller {
    /// A fresh actor looks at the whole queue once before any wake.
    fn default() -> Self {
        Puller { after: InboundId(0), more: true, owed: 0, idle: false }
    }
}

impl Puller {
    /// A throwaway session's: it never looks at the queue.
    pub(super) fn idle() -> Puller {
        Puller { more: false, idle: true, ..Puller::default() }
    }

    /// A wake arrived (or a new actor starts): `outstanding` is the intake's
    /// count at that moment. A throwaway session's puller stays idle.
    pub(super) fn woken(&mut self, outstanding: usize) {
        if self.idle {
            return;
        }
        self.more = true;
        self.owed = outstanding;
    }

    /// Whether a pull is due with `room` free places.
    pub(super) fn due(&self, room: usize) -> bool {
        self.more && room > 0
    }

    /// Takes up to `room` queued messages of `group`, each with the chat
    /// lines said before it that no earlier message took. A context that
    /// cannot be read is left for the next message; a queue that cannot be
    /// read is tried again at the next wake or result.
    pub(super) async fn pull(&mut self, store: &Queue, intake: &Intake, group: &GroupName, room: usize) -> Vec<Taken> {
        let pulled = {
            let _registered = intake.registering.lock().await;
            store.queued_inbound(group, self.after, room).await
        };
        let pulled = match pulled {
            Ok(pulled) => pulled,
            Err(e) => {
                tracing::error!(%group, %e, "cannot read the group's queued messages; trying again at the next event");
                return Vec::new();
            }
        };
        self.more = pulled.len() == room;
        let mut taken = Vec::with_capacity(pulled.len());
        for p in pulled {
            self.after = p.id;
            let context = match p.has_context {
                true => store.take_context(group, CONTEXT_LIMIT, p.id).await,
                false => Ok(TakenContext::default()),
            };
            taken.push(Taken { id: p.id, msg: p.msg, missed: missed(group, context), images: p.images });
        }
        taken
    }

    /// The queue is held (the budget is reached, or the CLI cannot start):
    /// the wakes seen are answered now, so a held group is not busy, and the
    /// queue is read again when the hold ends (`more` stays).
    pub(super) fn held(&mut self, intake: &Intake) {
        if self.owed > 0 {
            intake.acknowledge(self.owed);
            self.owed = 0;
        }
    }

    /// After the status is published: wakes answered by an empty queue are
    /// acknowledged, so the session stops counting as busy for them.
    pub(super) fn settle(&mut self, intake: &Intake) {
        if !self.more && self.owed > 0 {
            intake.acknowledge(self.owed);
            self.owed = 0;
        }
    }
}

fn missed(group: &GroupName, context: Result<TakenContext, StoreError>) -> Missed {
    match context {
        Ok(taken) => Missed { lines: taken.lines, omitted: taken.omitted },
        Err(e) => {
            tracing::warn!(%group, %e, "cannot take the chat's context; the message goes without it");
            Missed::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Platform;
    use crate::store::tests::store_with;
    use crate::store::InboundState;

    fn said(group: &GroupName, text: &str) -> Inbound {
        Inbound::new(group.clone(), crate::domain::Source::Chat(Platform::Telegram), "ana", text)
    }

    #[tokio::test]
    async fn a_pull_takes_what_fits_in_order_each_with_the_lines_before_it() {
        let group: GroupName = "team".parse().unwrap();
        let (_dir, store) = store_with(&group).await;
        let intake = Intake::default();
        store.queue().insert_inbound(&said(&group, "before one"), InboundState::Observed).await.unwrap();
        for text in ["one", "two", "three"] {
            store.queue().insert_inbound(&said(&group, text), InboundState::Queued).await.unwrap();
            store
                .queue()
                .insert_inbound(&said(&group, &format!("after {text}")), InboundState::Observed)
                .await
                .unwrap();
        }
        let mut puller = Puller::default();
        assert!(puller.due(2), "a fresh session looks at the queue once");
        let first = puller.pull(&store.queue(), &intake, &group, 2).await;
        let texts: Vec<&str> = first.iter().map(|t| t.msg.text.as_str()).collect();
        assert_eq!(texts, ["one", "two"]);
        assert_eq!(first[0].missed.lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(), ["before one"]);
        assert_eq!(first[1].missed.lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(), ["after one"]);
        assert!(puller.due(1), "a full pull may have left more");
        assert!(!puller.due(0), "no room, no pull");
        let rest = puller.pull(&store.queue(), &intake, &group, 2).await;
        assert_eq!(rest.iter().map(|t| t.msg.text.as_str()).collect::<Vec<_>>(), ["three"]);
        assert!(!puller.due(2), "a short pull emptied the queue");
        assert!(puller.pull(&store.queue(), &intake, &group, 2).await.is_empty(), "nothing is taken twice");
    }

    #[tokio::test]
    async fn wakes_count_as_work_until_a_pull_finds_the_queue_empty() {
        let group: GroupName = "team".parse().unwrap();
        let (_dir, store) = store_with(&group).await;
        let intake = Intake::default();
        let mut puller = Puller::default();
        puller.pull(&store.queue(), &intake, &group, 4).await;
        puller.settle(&intake);

        store.queue().insert_inbound(&said(&group, "one"), InboundState::Queued).await.unwrap();
        intake.wake();
        intake.woken().await;
        puller.woken(intake.wakes());
        assert_eq!(puller.pull(&store.queue(), &intake, &group, 1).await.len(), 1);
        puller.settle(&intake);
        assert_eq!(intake.wakes(), 1, "a full pull may have left more: still owed");
        // A wake meanwhile is kept for the next round, not lost.
        intake.wake();
        assert!(puller.pull(&store.queue(), &intake, &group, 1).await.is_empty());
        puller.settle(&intake);
        assert_eq!(intake.wakes(), 1, "only the wakes seen were answered");
        intake.woken().await;
        puller.woken(intake.wakes());
        puller.pull(&store.queue(), &intake, &group, 1).await;
        puller.settle(&intake);
        assert_eq!(intake.wakes(), 0);
    }

    #[tokio::test]
    async fn a_watched_message_is_not_taken_before_its_watcher_is_there() {
        let group: GroupName = "team".parse().unwrap();
        let (_dir, store) = store_with(&group).await;
        let intake = std::sync::Arc::new(Intake::default());
        // The router's side: pulls held, the message stored, then its watcher.
        let held = intake.hold_pulls().await.expect("a running session has not retired");
        let id = store.queue().insert_inbound(&said(&group, "report"), InboundState::Queued).await.unwrap();
        let pulling = {
            let (store, intake, group) = (store.clone(), intake.clone(), group.clone());
            tokio::spawn(async move { Puller::default().pull(&store.queue(), &intake, &group, 4).await.len() })
        };
        // Store round trips in which an unheld pull (one read, one write) would finish.
        for text in ["a", "b", "c", "d"] {
            store.queue().insert_inbound(&said(&group, text), InboundState::Observed).await.unwrap();
        }
        assert!(!pulling.is_finished(), "the message was taken before its watcher was registered");
        let (done, outcome) = oneshot::channel();
        intake.watch(id, done);
        drop(held);
        assert_eq!(pulling.await.unwrap(), 1);
        let told = TurnOutcome { is_error: false, text: "done".into(), cost_usd: None };
        intake.tell(&[id], &told);
        assert_eq!(outcome.await.unwrap(), told);
        assert!(!intake.is_watched(id));
    }

    #[tokio::test]
    async fn retiring_and_waking_exclude_each_other() {
        let intake = Intake::default();
        assert!(intake.wake());
        assert!(!intake.retire(), "a wake is owed: the actor must pull first");
        intake.acknowledge(1);
        let held = intake.hold_pulls().await.unwrap();
        assert!(!intake.retire(), "a watched message is being registered");
        drop(held);
        assert!(intake.retire());
        assert!(!intake.wake(), "nobody reads a retired queue: the router must start a fresh session");
        assert_eq!(intake.wakes(), 0, "a refused wake is not owed");
        assert!(intake.hold_pulls().await.is_none(), "nor is a watched message registered with it");
    }
}
