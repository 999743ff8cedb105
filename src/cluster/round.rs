//! One round of a node's claim loop, decided without I/O: from the groups
//! with work (and their leases as read), the live nodes and this node's own
//! load, which groups to claim now, which of its own to wake, and when to
//! look again for a group waiting out its grace. It remembers since when
//! each lease has been seen free, on the node's monotonic clock.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::claim::{decide, ClaimDecision, ClaimInputs, LeaseSeen};
use super::node_id::NodeId;
use super::placement::{preferred_node, NodeLoad};
use crate::domain::GroupName;

/// What one round found to do.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Free or expired leases this node claims now, in order.
    pub claim: Vec<GroupName>,
    /// Groups this node holds that have work: their sessions are woken
    /// (another node may have stored their messages).
    pub wake: Vec<GroupName>,
    /// The earliest end of a grace some group waits out here.
    pub look_again: Option<Instant>,
}

/// This node as a round sees it.
#[derive(Debug, Clone)]
pub struct Me {
    pub id: NodeId,
    pub incarnation: i64,
    /// Sessions it runs now, and may run at once.
    pub live: u64,
    pub slots: u64,
}

/// Since when each lease with work has been seen free (or held by an expired node).
#[derive(Debug, Default)]
pub struct Rounds {
    free_since: HashMap<GroupName, Instant>,
}

impl Rounds {
    /// Decides one round at `now`; `work` is every group with work and its
    /// lease, `nodes` the live nodes (this one among them once registered).
    pub fn plan(
        &mut self,
        me: &Me,
        work: &[(GroupName, LeaseSeen)],
        nodes: &[NodeLoad],
        grace: Duration,
        now: Instant,
    ) -> Plan {
        let mut plan = Plan::default();
        let mut live = me.live;
        self.free_since.retain(|group, _| work.iter().any(|(g, _)| g == group));
        for (group, lease) in work {
            let free = matches!(lease, LeaseSeen::Free | LeaseSeen::Held { holder_expired: true, .. });
            let free_for = if free {
                now.saturating_duration_since(*self.free_since.entry(group.clone()).or_insert(now))
            } else {
                self.free_since.remove(group);
                Duration::ZERO
            };
            let input = ClaimInputs {
                me: &me.id,
                my_incarnation: me.incarnation,
                has_work: true,
                lease: lease.clone(),
                preferred: preferred_node(group.as_str(), nodes).is_some_and(|n| n.id == me.id),
                free_for,
                grace,
                free_slot: live < me.slots,
            };
            match decide(&input) {
                ClaimDecision::ClaimNow => {
                    plan.claim.push(group.clone());
                    live += 1;
                }
                ClaimDecision::AlreadyMine => plan.wake.push(group.clone()),
                ClaimDecision::WaitGrace { left } => {
                    let at = now + left;
                    plan.look_again = Some(plan.look_again.map_or(at, |earlier| earlier.min(at)));
                }
                ClaimDecision::NotMine => {}
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(5);

    fn id(s: &str) -> NodeId {
        NodeId::new(s).unwrap()
    }

    fn group(s: &str) -> GroupName {
        s.parse().unwrap()
    }

    fn node(s: &str) -> NodeLoad {
        NodeLoad { id: id(s), live: 0, slots: 10 }
    }

    fn me(s: &str) -> Me {
        Me { id: id(s), incarnation: 1, live: 0, slots: 10 }
    }

    /// A group whose preferred node among `nodes` is `who`, and one whose is not.
    fn groups_for(who: &str, nodes: &[NodeLoad]) -> (GroupName, GroupName) {
        let names: Vec<GroupName> = (0..100).map(|i| group(&format!("g{i}"))).collect();
        let is = |g: &GroupName| preferred_node(g.as_str(), nodes).is_some_and(|n| n.id.as_str() == who);
        (names.iter().find(|g| is(g)).unwrap().clone(), names.iter().find(|g| !is(g)).unwrap().clone())
    }

    #[tokio::test(start_paused = true)]
    async fn the_preferred_node_claims_at_once_and_another_after_the_grace() {
        let nodes = [node("a"), node("b")];
        let (mine, theirs) = groups_for("a", &nodes);
        let work = [(mine.clone(), LeaseSeen::Free), (theirs.clone(), LeaseSeen::Free)];
        let mut rounds = Rounds::default();
        let start = Instant::now();
        let plan = rounds.plan(&me("a"), &work, &nodes, GRACE, start);
        assert_eq!(plan.claim, std::slice::from_ref(&mine));
        assert_eq!(plan.look_again, Some(start + GRACE), "the other group is looked at again after its grace");

        tokio::time::advance(GRACE).await;
        let plan = rounds.plan(&me("a"), &work[1..], &nodes, GRACE, Instant::now());
        assert_eq!(plan.claim, [theirs], "its preferred node did not take it within the grace");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_seen_held_again_starts_its_grace_over() {
        let nodes = [node("a"), node("b")];
        let (_, theirs) = groups_for("a", &nodes);
        let held = LeaseSeen::Held { node: id("b"), incarnation: 1, epoch: 1, holder_expired: false };
        let mut rounds = Rounds::default();
        rounds.plan(&me("a"), &[(theirs.clone(), LeaseSeen::Free)], &nodes, GRACE, Instant::now());
        tokio::time::advance(GRACE - Duration::from_secs(1)).await;
        rounds.plan(&me("a"), &[(theirs.clone(), held)], &nodes, GRACE, Instant::now());
        tokio::time::advance(Duration::from_secs(2)).await;
        let plan = rounds.plan(&me("a"), &[(theirs, LeaseSeen::Free)], &nodes, GRACE, Instant::now());
        assert!(plan.claim.is_empty(), "freed again just now: its grace starts over");
    }

    #[test]
    fn its_own_groups_are_woken_and_no_claim_goes_past_its_slots() {
        let nodes = [node("a")];
        let own = LeaseSeen::Held { node: id("a"), incarnation: 1, epoch: 3, holder_expired: false };
        let work = [(group("x"), own), (group("y"), LeaseSeen::Free), (group("z"), LeaseSeen::Free)];
        let full = Me { live: 1, slots: 2, ..me("a") };
        let plan = Rounds::default().plan(&full, &work, &nodes, GRACE, Instant::now());
        assert_eq!(plan.wake, [group("x")]);
        assert_eq!(plan.claim, [group("y")], "one slot was free: one claim");
    }

    #[test]
    fn a_group_held_by_a_dead_node_is_claimed_by_its_new_preferred_node() {
        let nodes = [node("a"), node("b")];
        let (mine, _) = groups_for("a", &nodes);
        let dead = LeaseSeen::Held { node: id("c"), incarnation: 4, epoch: 9, holder_expired: true };
        let plan = Rounds::default().plan(&me("a"), &[(mine.clone(), dead)], &nodes, GRACE, Instant::now());
        assert_eq!(plan.claim, [mine]);
    }
}
