//! Inbound messages → the right group's session.
//!
//! The router stores each message before handing it on ("persist first"),
//! starts a group's session actor on first use, and never fails the whole
//! daemon because of one group: errors are returned to the caller (a channel
//! adapter) to report to that chat.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use crate::domain::{GroupName, Inbound, InboundId, Missed};
use crate::session::{Command, SessionClosed, SessionDeps, SessionHandle, SessionStatus, TurnOutcome};
use crate::store::{InboundState, StoreError, TakenContext};

/// At most this many missed chat messages are handed to the agent as context.
const CONTEXT_LIMIT: usize = 50;

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
    // A std Mutex: it is held only to look up or insert a handle, never across an await.
    sessions: Mutex<HashMap<GroupName, SessionHandle>>,
}

impl Router {
    pub fn new(deps: Arc<SessionDeps>, tracker: TaskTracker) -> Router {
        Router { inner: Arc::new(Inner { deps, tracker, sessions: Mutex::new(HashMap::new()) }) }
    }

    /// Stores `msg`, then queues it for its group's session, after the chat
    /// messages the agent has not seen yet (see [`Router::observe`]).
    pub async fn send(&self, msg: Inbound) -> Result<InboundId, RouteError> {
        self.send_to(&self.session(&msg.group).await?, msg, None).await
    }

    /// Like [`Router::send`], and `done` hears how the turn answering it ended.
    pub async fn send_watched(
        &self,
        msg: Inbound,
        done: oneshot::Sender<TurnOutcome>,
    ) -> Result<InboundId, RouteError> {
        self.send_to(&self.session(&msg.group).await?, msg, Some(done)).await
    }

    /// Stores `msg` and hands it to a throwaway session of its group (see
    /// `SessionHandle::spawn_isolated`), which ends when the returned handle is dropped.
    pub async fn send_isolated(
        &self,
        msg: Inbound,
        done: oneshot::Sender<TurnOutcome>,
    ) -> Result<(InboundId, SessionHandle), RouteError> {
        let record = self.inner.deps.store.group(msg.group.as_str()).await?;
        let handle = SessionHandle::spawn_isolated(&record, self.inner.deps.clone(), &self.inner.tracker);
        let id = self.inner.deps.store.insert_inbound(&msg, InboundState::Queued).await?;
        // The chat's unread messages stay for the group's own session.
        handle.send(Command::Message { id, msg, missed: Missed::default(), done: Some(done) }).await?;
        Ok((id, handle))
    }

    async fn send_to(
        &self,
        handle: &SessionHandle,
        msg: Inbound,
        done: Option<oneshot::Sender<TurnOutcome>>,
    ) -> Result<InboundId, RouteError> {
        let store = &self.inner.deps.store;
        let id = store.insert_inbound(&msg, InboundState::Queued).await?;
        // The message is stored: from here it goes to the session whatever
        // else fails. Context that cannot be taken stays for the next message.
        let taken = store.take_context(&msg.group, CONTEXT_LIMIT).await.unwrap_or_else(|e| {
            tracing::warn!(group = %msg.group, %e, "cannot take the chat's context; the message goes without it");
            TakenContext::default()
        });
        let missed = Missed { lines: taken.lines.clone(), omitted: taken.omitted };
        if let Err(e) = handle.send(Command::Message { id, msg, missed, done }).await {
            // The session never took the message, so the context was not handed over.
            if let Err(e) = store.return_context(&taken).await {
                tracing::error!(%e, "cannot give back the chat context of a message the session refused");
            }
            // The chat is told it was not taken and to send it again: it must
            // not be answered at the next start too.
            if let Err(e) = store.set_inbound_state(&[id], InboundState::Failed).await {
                tracing::error!(%e, "cannot mark a message the session refused as failed; the next start answers it");
            }
            return Err(e.into());
        }
        Ok(id)
    }

    /// Sends again what a previous pincer accepted but never saw answered
    /// (it stopped or died mid-turn), so a restart loses no message. Each
    /// group's chat is told first. The messages go as they were written,
    /// without the context they once carried (that was handed on already).
    /// Returns how many were sent again.
    pub async fn redeliver_unanswered(&self) -> Result<usize, RouteError> {
        let store = &self.inner.deps.store;
        let mut by_group: Vec<(GroupName, Vec<(InboundId, Inbound)>)> = Vec::new();
        for (id, msg) in store.unanswered_inbound().await? {
            match by_group.iter_mut().find(|(g, _)| *g == msg.group) {
                Some((_, msgs)) => msgs.push((id, msg)),
                None => by_group.push((msg.group.clone(), vec![(id, msg)])),
            }
        }
        let mut sent = 0;
        for (group, msgs) in by_group {
            let handle = match self.session(&group).await {
                Ok(handle) => handle,
                Err(e) => {
                    tracing::warn!(%group, %e, "cannot answer messages left from before the restart; marking them failed");
                    let ids: Vec<InboundId> = msgs.iter().map(|(id, _)| *id).collect();
                    store.set_inbound_state(&ids, InboundState::Failed).await?;
                    continue;
                }
            };
            let text = format!("pincer restarted before answering {} message(s) here; answering now.", msgs.len());
            tracing::info!(%group, count = msgs.len(), "sending messages again that were not answered before the restart");
            self.inner.deps.outbox.notice(&group, &text).await;
            for (id, msg) in msgs {
                // One group's closed session must not cost the other groups their messages.
                let missed = Missed::default();
                if let Err(e) = handle.send(Command::Message { id, msg, missed, done: None }).await {
                    tracing::error!(%group, %e, "cannot send a message again after the restart; marking it failed");
                    store.set_inbound_state(&[id], InboundState::Failed).await?;
                    continue;
                }
                sent += 1;
            }
        }
        Ok(sent)
    }

    /// Stores a chat message that is not addressed to the agent. The agent
    /// reads it as context with the group's next message that is.
    pub async fn observe(&self, msg: &Inbound) -> Result<InboundId, RouteError> {
        Ok(self.inner.deps.store.insert_inbound(msg, InboundState::Observed).await?)
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
        let cost_usd = self.inner.deps.store.group_cost(group).await?;
        let waiting_replies = self.inner.deps.outbox.waiting(group).await?;
        Ok(GroupStatus { session, cost_usd, waiting_replies })
    }

    /// The group's session handle, starting its actor on first use.
    pub async fn session(&self, group: &GroupName) -> Result<SessionHandle, RouteError> {
        if let Some(handle) = self.lock().get(group) {
            return Ok(handle.clone());
        }
        let record = self.inner.deps.store.group(group.as_str()).await?;
        let mut sessions = self.lock();
        // Another caller may have started it while the store was asked.
        let handle = sessions
            .entry(group.clone())
            .or_insert_with(|| SessionHandle::spawn(&record, self.inner.deps.clone(), &self.inner.tracker));
        Ok(handle.clone())
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
