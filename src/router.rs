//! Inbound messages → the right group's session.
//!
//! The router stores each message in its group's queue and wakes the group's
//! session ("persist first": the store is the queue), starts a group's session
//! actor on first use, and never fails the whole daemon because of one group:
//! errors are returned to the caller (a channel adapter) to report to that chat.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use crate::domain::media::Outcome;
use crate::domain::{GroupName, Inbound, InboundId, Missed, Platform, Source};
use crate::media::{Fetch, Fetchers, Preparer, PreparerDeps};
use crate::retry::RetryPolicy;
use crate::session::{Command, SessionClosed, SessionDeps, SessionHandle, SessionStatus, TurnOutcome};
use crate::store::{GroupLeft, InboundState, StoreError, Stored};

/// Why a message could not be routed.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Closed(#[from] SessionClosed),
}

impl RouteError {
    /// The message was a second copy of one already taken (same platform id): nothing to do.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, RouteError::Store(StoreError::Duplicate(_)))
    }
}

/// What `/status` tells about a group.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupStatus {
    pub session: SessionStatus,
    pub cost_usd: f64,
    /// Replies in the outbox that have not reached the chat yet.
    pub waiting_replies: u64,
}

/// Cloneable access to every group's session.
#[derive(Clone)]
pub struct Router {
    inner: Arc<Inner>,
}

struct Inner {
    deps: Arc<SessionDeps>,
    tracker: TaskTracker,
    /// Fetches and prepares the media of messages that carry some, before
    /// their sessions take them.
    preparer: Preparer,
    fetchers: Fetchers,
    // A std Mutex: it is held only to look up or insert a handle, never across an await.
    sessions: Mutex<HashMap<GroupName, SessionHandle>>,
}

impl Router {
    /// The router, with the media preparer it hands messages with media to
    /// (it looks at the store at [`Router::prepare_waiting`] or the first
    /// message with media).
    pub fn new(deps: Arc<SessionDeps>, tracker: TaskTracker) -> Router {
        let fetchers = Fetchers::default();
        // Files attached at the terminal (`pincer chat --attach`): always served.
        fetchers.register(Platform::Console, Arc::new(crate::media::local::LocalFiles));
        let (ready_tx, mut ready) = tokio::sync::mpsc::channel(64);
        let delivery = &deps.config.delivery;
        let preparer_deps = PreparerDeps {
            queue: deps.queue.clone(),
            preparing: deps.preparing.clone(),
            outbox: deps.outbox.clone(),
            groups_dir: std::path::absolute(&deps.config.groups_dir).unwrap_or_else(|_| deps.config.groups_dir.clone()),
            fetchers: fetchers.clone(),
            live: deps.live.clone(),
            retry: RetryPolicy::new(delivery.retry_first, delivery.retry_cap),
            ready: ready_tx,
            leases: deps.leases.clone(),
        };
        let preparer = Preparer::spawn(preparer_deps, &tracker, deps.shutdown.clone());
        let router = Router {
            inner: Arc::new(Inner {
                deps,
                tracker: tracker.clone(),
                preparer,
                fetchers,
                sessions: Mutex::new(HashMap::new()),
            }),
        };
        // Ends when the preparer does (at shutdown): its sender goes with it.
        let waker = router.clone();
        tracker.spawn(async move {
            while let Some(group) = ready.recv().await {
                let woken = match waker.session(&group).await {
                    Ok(handle) => waker.wake(&group, handle).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = woken {
                    tracing::warn!(%group, %e, "a message with media is ready but its session cannot be woken");
                }
            }
        });
        router
    }

    /// `platform`'s adapter downloads its chats' files with `fetch`.
    pub fn register_fetch(&self, platform: Platform, fetch: Arc<dyn Fetch>) {
        self.inner.fetchers.register(platform, fetch);
    }

    /// Prepares the messages a previous pincer left half prepared; called
    /// once the adapters registered their [`Fetch`]es.
    pub fn prepare_waiting(&self) {
        self.inner.preparer.wake();
    }

    /// Whether the group has messages its session has not taken yet (one
    /// with media is prepared first, out of the session's sight).
    pub async fn untaken(&self, group: &GroupName) -> Result<bool, StoreError> {
        Ok(self.inner.deps.preparing.not_taken(group).await? > 0)
    }

    /// Stores `msg` in its group's queue and wakes the group's session,
    /// which takes it (after the chat messages the agent has not seen yet,
    /// see [`Router::observe`]) when it can. Returns once the message is
    /// stored: it never waits for the session, however busy.
    pub async fn send(&self, msg: Inbound) -> Result<InboundId, RouteError> {
        if let Source::Chat(platform) = msg.source {
            crate::metrics::counters::counters().message_in(platform.as_str());
        }
        // The group must exist before its message is stored.
        let handle = self.session(&msg.group).await?;
        if msg.media.iter().any(|a| a.outcome == Outcome::Waiting) {
            // Its session takes it once the preparer queued it.
            let id = match self.inner.deps.preparing.insert_preparing(&msg, false).await? {
                Stored::Preparing(id) => id,
                Stored::Merged { part, .. } => part,
            };
            crate::metrics::hop("stored");
            self.inner.preparer.wake();
            return Ok(id);
        }
        let id = self.inner.deps.queue.insert_inbound(&msg, InboundState::Queued).await?;
        crate::metrics::hop("stored");
        self.wake(&msg.group, handle).await?;
        Ok(id)
    }

    /// Wakes the group's session, or a fresh one if `handle`'s retired
    /// meanwhile (a fresh actor looks at the whole queue first).
    async fn wake(&self, group: &GroupName, mut handle: SessionHandle) -> Result<(), RouteError> {
        while !handle.wake() {
            handle = self.session(group).await?;
        }
        Ok(())
    }

    /// Like [`Router::send`], and `done` hears how the turn answering it ended.
    pub async fn send_watched(
        &self,
        msg: Inbound,
        done: oneshot::Sender<TurnOutcome>,
    ) -> Result<InboundId, RouteError> {
        let store = &self.inner.deps.queue;
        let mut done = done;
        loop {
            let handle = self.session(&msg.group).await?;
            match handle.store_watched(store.insert_inbound(&msg, InboundState::Queued), done).await? {
                Ok(id) => return Ok(id),
                // That session retired: nothing was stored; a fresh one takes it.
                Err(back) => done = back,
            }
        }
    }

    /// Stores `msg` and hands it to a throwaway session of its group (see
    /// `SessionHandle::spawn_isolated`), which ends when the returned handle is dropped.
    pub async fn send_isolated(
        &self,
        msg: Inbound,
        done: oneshot::Sender<TurnOutcome>,
    ) -> Result<(InboundId, SessionHandle), RouteError> {
        let record = self.inner.deps.groups.group(msg.group.as_str()).await?;
        let handle = SessionHandle::spawn_isolated(&record, self.inner.deps.clone(), &self.inner.tracker);
        // Stored as taken (`sent`), not queued: the group's own session, which
        // takes the queue, must never see it. A restart fails it (its run is rerun).
        let id = self.inner.deps.queue.insert_inbound(&msg, InboundState::Sent).await?;
        // The chat's unread messages stay for the group's own session.
        handle.send(Command::Message { id, msg, missed: Missed::default(), done: Some(done) }).await?;
        Ok((id, handle))
    }

    /// At start, before any chat or schedule is served: what a previous
    /// pincer accepted but never saw answered (it stopped or died mid-turn)
    /// goes back in its group's queue, and each such group's chat is told
    /// first; its runs cut off are due again (the restart's recovery,
    /// `store/recovery.rs`, before the scheduler starts). The messages go as
    /// they were written, without the context they once carried (that was
    /// handed on already). A group that cannot be served (deleted by hand)
    /// has its messages failed, and costs the others nothing. Returns how
    /// many messages wait again.
    pub async fn recover(&self) -> Result<usize, RouteError> {
        let store = &self.inner.deps.queue;
        let recovered = store.recover_after_restart(chrono::Utc::now()).await?;
        for id in &recovered.runs_cut_off {
            tracing::warn!(schedule = %id, "a run was cut off when pincer last stopped; running it again if still active");
        }
        let mut waiting = 0;
        // Every waiting message is told, not only those written again: each waited through the restart.
        for GroupLeft { group, waiting: messages, .. } in recovered.groups {
            let handle = match group.parse::<GroupName>() {
                Ok(name) => self.session(&name).await.map(|handle| (name, handle)),
                Err(e) => Err(RouteError::Store(StoreError::UnknownGroup(format!("{group} ({e})")))),
            };
            let (name, handle) = match handle {
                Ok(found) => found,
                Err(e) => {
                    tracing::warn!(%group, %e, "cannot answer messages left from before the restart; marking them failed");
                    store.fail_queued(&group).await?;
                    continue;
                }
            };
            let text = format!("pincer restarted before answering {messages} message(s) here; answering now.");
            tracing::info!(group = %name, messages, "answering messages left unanswered before the restart");
            self.inner.deps.outbox.notice(&name, &text).await;
            self.wake(&name, handle).await?;
            waiting += messages;
        }
        Ok(waiting)
    }

    /// Stores a chat message that is not addressed to the agent. The agent
    /// reads it as context with the group's next message that is.
    pub async fn observe(&self, msg: &Inbound) -> Result<InboundId, RouteError> {
        if msg.media.iter().any(|a| a.outcome == Outcome::Waiting) {
            // Its files are fetched too, so a later "what is in that photo?"
            // finds them; the queue waits behind it, keeping the order.
            let id = match self.inner.deps.preparing.insert_preparing(msg, true).await? {
                Stored::Preparing(id) => id,
                Stored::Merged { part, .. } => part,
            };
            self.inner.preparer.wake();
            return Ok(id);
        }
        Ok(self.inner.deps.queue.insert_inbound(msg, InboundState::Observed).await?)
    }

    /// Interrupts the group's current turn, if its session is live.
    pub async fn interrupt(&self, group: &GroupName) -> Result<(), RouteError> {
        Ok(self.session(group).await?.send(Command::Interrupt).await?)
    }

    /// Ends the group's CLI session; its next message starts a fresh one.
    pub async fn new_session(&self, group: &GroupName) -> Result<(), RouteError> {
        Ok(self.session(group).await?.send(Command::NewSession).await?)
    }

    /// The group's session as its actor last published it, what its turns
    /// have cost so far, and how many replies wait for its chat.
    pub async fn status(&self, group: &GroupName) -> Result<GroupStatus, RouteError> {
        let session = self.session(group).await?.status();
        let cost_usd = self.inner.deps.budgets.group_cost(group).await?;
        let waiting_replies = self.inner.deps.outbox.waiting(group).await?;
        Ok(GroupStatus { session, cost_usd, waiting_replies })
    }

    /// The group's session handle, starting its actor on first use (and
    /// again after it retired for lack of work).
    pub async fn session(&self, group: &GroupName) -> Result<SessionHandle, RouteError> {
        if let Some(handle) = self.lock().get(group).filter(|h| !h.is_retired()) {
            return Ok(handle.clone());
        }
        let record = self.inner.deps.groups.group(group.as_str()).await?;
        let mut sessions = self.lock();
        // Another caller may have started it while the store was asked.
        if let Some(handle) = sessions.get(group).filter(|h| !h.is_retired()) {
            return Ok(handle.clone());
        }
        // Retired sessions leave the map whenever one is added, so it holds
        // about the groups in use, not every group ever served.
        sessions.retain(|_, h| !h.is_retired());
        let handle = SessionHandle::spawn(&record, self.inner.deps.clone(), &self.inner.tracker);
        sessions.insert(group.clone(), handle.clone());
        Ok(handle)
    }

    /// Wakes the group's session (starting one if none runs): its queue
    /// may hold messages another pincer node stored.
    pub async fn wake_group(&self, group: &GroupName) -> Result<(), RouteError> {
        let handle = self.session(group).await?;
        self.wake(group, handle).await
    }

    /// Whether the group has a session actor now (not retired).
    pub fn runs(&self, group: &GroupName) -> bool {
        self.lock().get(group).is_some_and(|h| !h.is_retired())
    }

    /// Every group with a session actor now (not retired), by name.
    pub fn statuses(&self) -> Vec<(GroupName, SessionStatus)> {
        let mut all: Vec<(GroupName, SessionStatus)> =
            self.lock().iter().filter(|(_, h)| !h.is_retired()).map(|(g, h)| (g.clone(), h.status())).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// `claude.max_live_sessions`.
    pub fn max_live_sessions(&self) -> usize {
        self.inner.deps.config.claude.max_live_sessions
    }

    /// How many sessions the router holds (retired ones until the next start).
    pub fn sessions_held(&self) -> usize {
        self.lock().len()
    }

    /// The group's settings changed in the store: a live session re-reads
    /// them now (one that has not started reads them when it does).
    pub async fn settings_changed(&self, group: &GroupName) {
        let handle = self.lock().get(group).cloned();
        if let Some(handle) = handle {
            if let Err(e) = handle.send(Command::ReloadSettings).await {
                tracing::debug!(%group, %e, "the session ended before it could re-read its settings");
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<GroupName, SessionHandle>> {
        self.inner.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::domain::Source;
    use crate::session::fake_cli::FakeCli;
    use crate::store::{GroupSettings, Store};

    /// Advances paused time a millisecond at a time until `done` holds.
    async fn until<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
        let stuck = std::time::Instant::now() + Duration::from_secs(20);
        while !done().await {
            assert!(std::time::Instant::now() < stuck, "never happened: {what}");
            tokio::time::advance(Duration::from_millis(1)).await;
        }
    }

    async fn answered(store: &Store, group: &GroupName) -> usize {
        let history = store.history().history(group, 100).await.unwrap();
        history
            .iter()
            .filter(|e| matches!(e, crate::store::HistoryEntry::Inbound { state, .. } if state == "answered"))
            .count()
    }

    #[tokio::test(start_paused = true)]
    async fn sessions_of_quiet_groups_retire_and_leave_and_their_next_message_is_answered() {
        // SQLite works on its own threads: keep the paused clock from jumping meanwhile.
        let spinner = tokio::spawn(async {
            loop {
                tokio::task::yield_now().await;
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("pincer.db")).await.unwrap();
        let config = Arc::new(crate::session::tests::test_config());
        let (deps, _approvals, shutdown) = crate::session::tests::deps(&store, config.clone(), &FakeCli::default());
        let tracker = TaskTracker::new();
        let router = Router::new(deps, tracker.clone());
        let groups: Vec<GroupName> = ["one", "two", "three"].iter().map(|n| n.parse().unwrap()).collect();
        let mut handles = Vec::new();
        for group in &groups {
            store.groups().add_group(group, &GroupSettings::default()).await.unwrap();
            router.send(Inbound::new(group.clone(), Source::Console, "ann", "hello")).await.unwrap();
            handles.push(router.session(group).await.unwrap());
        }
        for group in &groups {
            until("every group answered", || async { answered(&store, group).await == 1 }).await;
        }
        // One step at a time, as the clock runs: a single jump past both would
        // close the processes at its end and restart the retire countdown
        // there, leaving `until` a whole RETIRE_AFTER to creep through.
        tokio::time::advance(config.claude.idle_timeout).await;
        until("every quiet session closed", || async { handles.iter().all(|h| !h.status().live) }).await;
        tokio::time::advance(crate::session::RETIRE_AFTER).await;
        until("every quiet session retired", || async { handles.iter().all(SessionHandle::is_retired) }).await;

        // The next message of a quiet group starts a fresh session, and the
        // retired ones leave the router as it does.
        router.send(Inbound::new(groups[0].clone(), Source::Console, "ann", "still there?")).await.unwrap();
        until("answered by a fresh session", || async { answered(&store, &groups[0]).await == 2 }).await;
        assert_eq!(router.sessions_held(), 1, "only the group in use is held");

        shutdown.cancel();
        tracker.close();
        tracker.wait().await;
        spinner.abort();
    }
}
