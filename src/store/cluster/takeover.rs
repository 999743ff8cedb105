//! A cluster node claiming a group's lease, and in the same transaction
//! taking over what the previous holder left in flight (PostgreSQL only).
//!
//! The claim's `UPDATE` of the lease row waits for every fenced write of the
//! previous holder still open, so what this transaction reads is everything
//! that holder committed. In it, the takeover's `Recovery` (`store/recovery.rs`,
//! the one a restart runs, for this group alone): chat and terminal messages
//! written to the old CLI but never answered go back in the queue (answered
//! again once, after a notice, as after a restart on one machine; a failed
//! download among them tried again); scheduled prompts in flight are failed,
//! and the runs left `running` are logged as cut off with their schedules due
//! again (the rerun sends the prompt). Only then does this
//! node hold the lease in memory, so nothing here runs the group before the
//! takeover is committed. A lease row locked by a stuck holder is waited for
//! only briefly (`cluster::bounds`): the group is skipped this round. A
//! commit whose answer is lost leaves a ghost lease, which the next rounds
//! adopt (`cluster::ghost`).

use chrono::{DateTime, Utc};

use super::claims::{begin_claim, claim_row, skipped_when_locked};
use crate::cluster::fence::LeaseName;
use crate::cluster::node_id::NodeId;
use crate::domain::GroupName;
use crate::store::handles::ClusterStore;
use crate::store::recovery::Recovery;
use crate::store::StoreError;

/// What a claim took over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Takeover {
    /// The claim's epoch.
    pub epoch: i64,
    /// Chat (and terminal) messages the previous holder had written but not seen answered:
    /// waiting again. Those that never reached it are not counted: every group
    /// waiting for its claim has some, and its chat is told nothing about them.
    pub requeued: u64,
    /// Runs the previous holder left unfinished: their schedules are due again.
    pub runs_cut_off: u64,
}

impl ClusterStore {
    /// Claims `group`'s lease for this node (free, or its holder's row
    /// expired) and takes over what its previous holder left in flight; `None`: not claimed.
    pub async fn claim_group(
        &self,
        group: &GroupName,
        node: &NodeId,
        incarnation: i64,
        now: DateTime<Utc>,
    ) -> Result<Option<Takeover>, StoreError> {
        let lease = LeaseName::group(group);
        let claiming = async {
            let mut tx = begin_claim(&self.db).await?;
            let epoch = claim_row(&mut tx, &lease, node, incarnation).await?;
            let Some(epoch) = epoch else {
                return Ok(None);
            };
            let recovered = Recovery::takeover(group, now).run(&mut tx).await?;
            tx.commit().await?;
            let requeued = recovered.groups.iter().map(|left| left.written_again).sum::<usize>();
            Ok(Some((epoch, requeued as u64, recovered.runs_cut_off.len() as u64)))
        };
        let claimed = self.db.within("a claim", claiming).await.or_else(skipped_when_locked)?;
        let Some((epoch, requeued, runs_cut_off)) = claimed else {
            return Ok(None);
        };
        self.db.fences.claimed(&lease, epoch);
        crate::metrics::counters::counters().lease_claimed("group");
        Ok(Some(Takeover { epoch, requeued, runs_cut_off }))
    }
}

#[cfg(test)]
mod tests;
