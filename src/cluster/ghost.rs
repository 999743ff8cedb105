//! Ghost leases (issue 45): a lease the store shows held by this node's
//! very incarnation while the node does not know it holds it. A claim whose
//! `COMMIT` landed but whose answer was lost (the connection cut, the claim
//! given up after its bound) leaves one: nothing would run the group or
//! serve the gateway, and nothing would release it until the node restarts.
//! Each claim round reads this node's rows (`ClusterStore::held_in_store`) and
//! this decides, without I/O, what to do with each.
//!
//! A group's lease is adopted at the epoch the store shows: its claim's
//! takeover committed with it, so the node runs the group as if the claim
//! had answered. A gateway's is released: its gateway loop claims it again
//! (a fresh epoch) within half a second, the way it claims any free lease,
//! and needs no word from here. Either only once the lease has looked this
//! way for [`SETTLE`]: a claim that did answer records its lease in memory
//! right after its commit, so a lease seen between the two is no ghost.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::fence::LeaseName;

/// How long a lease must look like a ghost before it is treated as one:
/// far longer than a claim's commit-to-memory step (microseconds), short
/// against a lease's ttl.
pub const SETTLE: Duration = Duration::from_secs(1);

/// What to do with one ghost lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GhostAction {
    /// Hold it in memory at `epoch`: the node runs the group from now on.
    Adopt { lease: LeaseName, epoch: i64 },
    /// Let it go at `epoch` (only if still held at that epoch).
    Release { lease: LeaseName, epoch: i64 },
}

/// The leases seen as ghosts and since when, on the node's monotonic clock.
#[derive(Debug, Default)]
pub struct Ghosts {
    since: HashMap<(LeaseName, i64), Instant>,
}

impl Ghosts {
    /// `stored`: every lease the store shows held by this node's current
    /// incarnation, with its epoch; `known`: the epoch this node holds a lease
    /// at in memory, if it does. What to do now, at `now`.
    pub fn decide(
        &mut self,
        stored: &[(LeaseName, i64)],
        known: impl Fn(&LeaseName) -> Option<i64>,
        now: Instant,
    ) -> Vec<GhostAction> {
        let ghosts: Vec<&(LeaseName, i64)> =
            stored.iter().filter(|(lease, epoch)| known(lease) != Some(*epoch)).collect();
        self.since.retain(|key, _| ghosts.iter().any(|g| g.0 == key.0 && g.1 == key.1));
        let mut actions = Vec::new();
        for (lease, epoch) in ghosts {
            let since = *self.since.entry((lease.clone(), *epoch)).or_insert(now);
            if now.saturating_duration_since(since) < SETTLE {
                continue;
            }
            self.since.remove(&(lease.clone(), *epoch));
            let (lease, epoch) = (lease.clone(), *epoch);
            actions.push(if lease.is_gateway() {
                GhostAction::Release { lease, epoch }
            } else {
                GhostAction::Adopt { lease, epoch }
            });
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::GroupName;

    fn group(name: &str) -> LeaseName {
        LeaseName::group(&name.parse::<GroupName>().unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn a_groups_ghost_is_adopted_at_the_stored_epoch_once_it_settled() {
        let mut ghosts = Ghosts::default();
        let stored = [(group("team"), 7)];
        assert!(ghosts.decide(&stored, |_| None, Instant::now()).is_empty(), "not at first sight");
        tokio::time::advance(SETTLE).await;
        let actions = ghosts.decide(&stored, |_| None, Instant::now());
        assert_eq!(actions, [GhostAction::Adopt { lease: group("team"), epoch: 7 }]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_gateways_ghost_is_released_for_its_loop_to_claim_again() {
        let mut ghosts = Ghosts::default();
        let stored = [(LeaseName::telegram(5), 2)];
        ghosts.decide(&stored, |_| None, Instant::now());
        tokio::time::advance(SETTLE * 2).await;
        let actions = ghosts.decide(&stored, |_| None, Instant::now());
        assert_eq!(actions, [GhostAction::Release { lease: LeaseName::telegram(5), epoch: 2 }]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_known_at_its_epoch_is_no_ghost_and_one_that_became_known_starts_over() {
        let mut ghosts = Ghosts::default();
        let stored = [(group("team"), 3), (group("crew"), 4)];
        let known = |l: &LeaseName| (l == &group("team")).then_some(3);
        ghosts.decide(&stored, |_| None, Instant::now());
        tokio::time::advance(SETTLE / 2).await;
        // The claim of `team` answered meanwhile: it is known now.
        ghosts.decide(&stored, known, Instant::now());
        tokio::time::advance(SETTLE / 2).await;
        assert_eq!(
            ghosts.decide(&stored, known, Instant::now()),
            [GhostAction::Adopt { lease: group("crew"), epoch: 4 }]
        );
        // Forgotten again later (lost and claimed anew): a fresh wait.
        assert!(ghosts.decide(&stored, |_| None, Instant::now()).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_epoch_of_the_same_lease_waits_its_own_settle() {
        let mut ghosts = Ghosts::default();
        ghosts.decide(&[(group("team"), 1)], |_| None, Instant::now());
        tokio::time::advance(SETTLE).await;
        assert!(ghosts.decide(&[(group("team"), 2)], |_| None, Instant::now()).is_empty());
        // An epoch known in memory other than the stored one: the stored one wins after the settle.
        tokio::time::advance(SETTLE).await;
        let actions = ghosts.decide(&[(group("team"), 2)], |_| Some(1), Instant::now());
        assert_eq!(actions, [GhostAction::Adopt { lease: group("team"), epoch: 2 }]);
    }
}
