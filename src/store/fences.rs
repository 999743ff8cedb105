//! The leases a cluster node holds and the epoch it claimed each at: what
//! its fenced writes check (`fenced.rs`), and what the node's sessions ask
//! before they run anything. No I/O; shared by every handle through the
//! backend (`db.rs`). Every change is announced on a watch, so a session
//! whose lease went away stops its CLI at once, however it was lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::error::StoreError;
use crate::cluster::fence::{Fence, LeaseName};
use crate::cluster::node_id::NodeId;

/// The leases this node holds and their epochs, once it is a cluster node
/// (none: every write goes unfenced, as on one machine).
#[derive(Clone, Debug)]
pub(super) struct Fences {
    held: Arc<Mutex<Option<Holder>>>,
    /// Bumped at every change of what is held.
    changed: Arc<watch::Sender<u64>>,
    /// Until when this node's CLIs may run (its membership's deadline).
    deadline: Arc<watch::Sender<Option<tokio::time::Instant>>>,
}

impl Default for Fences {
    fn default() -> Self {
        Fences {
            held: Arc::default(),
            changed: Arc::new(watch::channel(0).0),
            deadline: Arc::new(watch::channel(None).0),
        }
    }
}

#[derive(Debug)]
struct Holder {
    node: NodeId,
    epochs: HashMap<LeaseName, i64>,
    /// Grows at every [`Fences::hold_as`] (a start, a lapse), so that an
    /// adoption decided before one does not land after it.
    generation: u64,
}

impl Fences {
    /// The fence a write to `lease` must check: `None` when this store is
    /// not a cluster node's; `Err` when the node holds no such lease.
    pub(super) fn of(&self, lease: &LeaseName) -> Result<Option<Fence>, StoreError> {
        let held = self.lock();
        let Some(holder) = held.as_ref() else { return Ok(None) };
        match holder.epochs.get(lease) {
            Some(&epoch) => Ok(Some(Fence { lease: lease.clone(), node: holder.node.clone(), epoch })),
            None => Err(StoreError::Fenced(lease.as_str().to_owned())),
        }
    }

    /// This node's id, once it entered a cluster.
    pub(super) fn node(&self) -> Option<NodeId> {
        self.lock().as_ref().map(|holder| holder.node.clone())
    }

    /// Whether this node may act for `lease` now: always on one machine; on
    /// a cluster node, while it holds it.
    pub(super) fn holds(&self, lease: &LeaseName) -> bool {
        self.lock().as_ref().is_none_or(|holder| holder.epochs.contains_key(lease))
    }

    /// Whether this store is a cluster node's (its group writes are fenced).
    pub(super) fn is_cluster_node(&self) -> bool {
        self.lock().is_some()
    }

    /// The leases held now, by name.
    pub(super) fn held(&self) -> Vec<LeaseName> {
        let mut names: Vec<LeaseName> =
            self.lock().as_ref().map(|holder| holder.epochs.keys().cloned().collect()).unwrap_or_default();
        names.sort();
        names
    }

    /// Forgets `lease` (it moved on, or was let go).
    pub(super) fn forget(&self, lease: &LeaseName) {
        let removed = self.lock().as_mut().is_some_and(|holder| holder.epochs.remove(lease).is_some());
        if removed {
            self.bump();
        }
    }

    /// From now on this store is `node`'s, holding no lease (at start, and
    /// when the node's incarnation lapsed: whatever it held is gone).
    pub(super) fn hold_as(&self, node: &NodeId) {
        {
            let mut held = self.lock();
            let generation = held.as_ref().map_or(0, |holder| holder.generation.wrapping_add(1));
            *held = Some(Holder { node: node.clone(), epochs: HashMap::new(), generation });
        }
        self.bump();
    }

    /// Which [`Fences::hold_as`] this is (0 on one machine).
    pub(super) fn generation(&self) -> u64 {
        self.lock().as_ref().map_or(0, |holder| holder.generation)
    }

    /// `lease` is held at `epoch`, if nothing was dropped since `generation`
    /// (a ghost lease found by a look that began then); whether it is now.
    pub(super) fn adopt(&self, lease: &LeaseName, epoch: i64, generation: u64) -> bool {
        let adopted = match self.lock().as_mut() {
            Some(holder) if holder.generation == generation => {
                holder.epochs.insert(lease.clone(), epoch);
                true
            }
            _ => false,
        };
        if adopted {
            self.bump();
        }
        adopted
    }

    /// `lease` is held at `epoch`.
    pub(super) fn claimed(&self, lease: &LeaseName, epoch: i64) {
        if let Some(holder) = self.lock().as_mut() {
            holder.epochs.insert(lease.clone(), epoch);
        }
        self.bump();
    }

    /// Told of every change of what is held.
    pub(super) fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The node's deadline moved (a renewal succeeded).
    pub(super) fn set_deadline(&self, until: tokio::time::Instant) {
        self.deadline.send_if_modified(|now| {
            let moved = *now != Some(until);
            *now = Some(until);
            moved
        });
    }

    /// The node's deadline, to watch; `None` on one machine or before the first renewal.
    pub(super) fn deadline(&self) -> watch::Receiver<Option<tokio::time::Instant>> {
        self.deadline.subscribe()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Holder>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}
