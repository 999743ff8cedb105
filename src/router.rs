//! Inbound messages → the right group's session.
//!
//! The router stores each message before handing it on ("persist first"),
//! starts a group's session actor on first use, and never fails the whole
//! daemon because of one group: errors are returned to the caller (a channel
//! adapter) to report to that chat.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::task::TaskTracker;

use crate::domain::{GroupName, Inbound, InboundId};
use crate::session::{Command, SessionClosed, SessionDeps, SessionHandle};
use crate::store::StoreError;

/// Why a message could not be routed.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Closed(#[from] SessionClosed),
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

    /// Stores `msg`, then queues it for its group's session.
    pub async fn send(&self, msg: Inbound) -> Result<InboundId, RouteError> {
        let handle = self.session(&msg.group).await?;
        let id = self.inner.deps.store.insert_inbound(&msg).await?;
        handle.send(Command::Message { id, msg }).await?;
        Ok(id)
    }

    /// Interrupts the group's current turn, if its session is live.
    pub async fn interrupt(&self, group: &GroupName) -> Result<(), RouteError> {
        Ok(self.session(group).await?.send(Command::Interrupt).await?)
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<GroupName, SessionHandle>> {
        self.inner.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}
