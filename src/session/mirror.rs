//! On a cluster node, what a group's agent is doing is mirrored into the
//! store, so the node serving the group's chat (the platform's gateway, often
//! another node) shows its status message, Stop button and "typing…" as if
//! the group ran there (issue 45; the reader is `channel::progress::remote`).
//!
//! One task per session, beside its actor: it follows the session's published
//! [`Activity`] and writes it at most every [`EVERY`] (a watch keeps only the
//! newest state, so a burst of steps is one write, and the last state is
//! always written). Each write is fenced to the group's lease: a node that
//! lost the group writes nothing, and one that never ran it (a gateway's idle
//! session) never starts writing, since its activity never changes. On one
//! machine no mirror runs: the chat's adapter reads the session directly.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::domain::activity::{wire, Activity};
use crate::domain::GroupName;
use crate::store::{Activities, StoreError};

/// The shortest time between two writes of one group's activity: a status
/// message is edited every few seconds at most, so twice a second shows
/// every state a person would see.
pub const EVERY: Duration = Duration::from_millis(500);

/// Mirrors `activity` for `group` as `node` until the session is gone (its
/// last state written) or `shutdown`.
pub async fn run(
    group: GroupName,
    mut activity: watch::Receiver<Activity>,
    store: Activities,
    node: String,
    shutdown: CancellationToken,
) {
    loop {
        // Nothing is written before the first change: the state a session
        // starts with is what a reader assumes of a row it has not got.
        let open = tokio::select! {
            () = shutdown.cancelled() => return,
            changed = activity.changed() => changed.is_ok(),
        };
        let now = activity.borrow_and_update().clone();
        write(&store, &group, &node, &now).await;
        if !open {
            return;
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
    }
}

async fn write(store: &Activities, group: &GroupName, node: &str, activity: &Activity) {
    let body = wire::encode(activity, Instant::now());
    match store.mirror(group, node, &body).await {
        Ok(()) => {}
        // Not this node's group (any more): its chat is shown the owner's.
        Err(StoreError::Fenced(_)) => {
            tracing::debug!(group = %group, "not mirroring the activity of a group held elsewhere")
        }
        // Only what the chat is shown: the next change is written again.
        Err(e) => tracing::warn!(group = %group, %e, "cannot mirror the agent's activity for the chat's node"),
    }
}
