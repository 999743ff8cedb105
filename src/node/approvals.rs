//! Tool approvals across cluster nodes (issue 36): a session on any node
//! can ask its group's admins in a chat that only the gateway node serves.
//! The request goes through the store: the asking node writes a row and
//! keeps the session's answer channel (`asking`); the node holding the
//! platform's gateway lease shows the rows no live gateway shows and writes
//! the verdict back (`showing`); what each does at a look is `plan`'s.
//! LISTEN/NOTIFY (`node::hints`) only wakes both early: each also looks
//! every 250 ms. On one machine none of this starts, and console groups
//! (no chat) are always asked on their own node. The tasks (`Asking`, and
//! a gateway round's `Showing`) are handed back to whoever starts them.

mod asking;
mod plan;
mod showing;

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

use crate::channel::approvals::{Askers, ASK_QUEUE};
use crate::channel::{ApprovalAsk, Directory};
use crate::cluster::{LeaseName, NodeId};
use crate::domain::Platform;
use crate::outbox::Outbox;
use crate::store::Approvals;

pub use asking::Asking;
pub use showing::Shower;

/// A cluster node's approvals: what its gateways show with, and where its
/// sessions' requests for a gateway's platform go.
pub struct Bridge {
    store: Approvals,
    directory: Directory,
    outbox: Outbox,
    hints: watch::Receiver<u64>,
    /// Where the requests to store go (the asking task reads them).
    requests: mpsc::Sender<ApprovalAsk>,
    /// The platforms this node has a gateway for: their requests go through the store.
    platforms: Mutex<Vec<Platform>>,
    /// The adapters' own queues, kept open (nothing is sent on them any more).
    kept: Mutex<Vec<mpsc::Sender<ApprovalAsk>>>,
}

impl Bridge {
    /// `node`'s bridge and its asking side, to run; `hints` is bumped when
    /// another node wrote to the table.
    pub fn new(
        store: Approvals,
        node: NodeId,
        ports: (Directory, Outbox),
        hints: watch::Receiver<u64>,
    ) -> (Arc<Bridge>, Asking) {
        let (requests, routed) = mpsc::channel(ASK_QUEUE);
        let asking = Asking { store: store.clone(), node, hints: hints.clone(), requests: routed };
        let (directory, outbox) = ports;
        let (platforms, kept) = (Mutex::default(), Mutex::default());
        (Arc::new(Bridge { store, directory, outbox, hints, requests, platforms, kept }), asking)
    }

    /// What the gateway of `lease` shows approvals with; `None` for a lease
    /// of no platform that shows them.
    pub fn shower(&self, lease: &LeaseName) -> Option<Shower> {
        let platform = lease.platform()?;
        lock(&self.platforms).push(platform);
        Some(Shower {
            store: self.store.clone(),
            directory: self.directory.clone(),
            outbox: self.outbox.clone(),
            platform,
            lease: lease.clone(),
            hints: self.hints.clone(),
        })
    }

    /// Sends the requests for each platform this node has a gateway for
    /// through the store (call it once every gateway was made).
    pub fn divert(&self, askers: &mut Askers) {
        for platform in lock(&self.platforms).iter() {
            if let Some(adapter) = askers.divert(*platform, self.requests.clone()) {
                lock(&self.kept).push(adapter);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
