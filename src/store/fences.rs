//! The leases a cluster node holds and the epoch it claimed each at: what
//! its fenced writes check (`leases.rs`). No I/O; shared by every handle
//! through the backend (`db.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::error::StoreError;
use crate::cluster::fence::{Fence, LeaseName};
use crate::cluster::node_id::NodeId;

/// The leases this node holds and their epochs, once it is a cluster node
/// (none: every write goes unfenced, as on one machine).
#[derive(Clone, Debug, Default)]
pub(super) struct Fences(Arc<Mutex<Option<Holder>>>);

#[derive(Debug)]
struct Holder {
    node: NodeId,
    epochs: HashMap<LeaseName, i64>,
}

impl Fences {
    /// The fence a write to `lease` must check: `None` when this store is
    /// not a cluster node's; `Err` when the node holds no such lease.
    pub(super) fn of(&self, lease: &LeaseName) -> Result<Option<Fence>, StoreError> {
        let held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(holder) = held.as_ref() else { return Ok(None) };
        match holder.epochs.get(lease) {
            Some(&epoch) => Ok(Some(Fence { lease: lease.clone(), node: holder.node.clone(), epoch })),
            None => Err(StoreError::Fenced(lease.as_str().to_owned())),
        }
    }

    /// Forgets `lease` (it moved on, or was let go).
    pub(super) fn forget(&self, lease: &LeaseName) {
        if let Some(holder) = self.0.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            holder.epochs.remove(lease);
        }
    }

    /// From now on this store is `node`'s, holding no lease yet.
    pub(super) fn hold_as(&self, node: &NodeId) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Holder { node: node.clone(), epochs: HashMap::new() });
    }

    /// `lease` is held at `epoch`.
    pub(super) fn claimed(&self, lease: &LeaseName, epoch: i64) {
        if let Some(holder) = self.0.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            holder.epochs.insert(lease.clone(), epoch);
        }
    }
}
