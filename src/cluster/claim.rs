//! Whether this node should try to claim a group's lease now, from what it
//! read of the lease and how long it has seen the lease free; and the epoch a
//! claim writes. Pure: touches nothing. The claim itself is one atomic SQL
//! statement (`store::cluster::fence::CLAIM_LEASE`), which checks again: this only
//! decides when to try, so a wrong answer costs a wasted statement, never
//! two owners.

use std::time::Duration;

use super::node_id::NodeId;

/// A group's lease row as the node read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseSeen {
    /// No row yet, or released (no holder).
    Free,
    Held {
        node: NodeId,
        incarnation: i64,
        epoch: i64,
        /// The holder's `nodes` row (that node and incarnation) is missing
        /// or expired by the database's clock: the SQL computed this.
        holder_expired: bool,
    },
}

/// What a node does about one group now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimDecision {
    /// Run the claim statement.
    ClaimNow,
    /// The lease is up for grabs but the preferred node goes first: try
    /// again after `left` unless someone claimed it meanwhile.
    WaitGrace { left: Duration },
    /// Leave it: held by a live node, nothing to do, or no slot here.
    NotMine,
    /// This node (this very process) holds it.
    AlreadyMine,
}

/// What the node knows about one group when it decides.
#[derive(Debug, Clone)]
pub struct ClaimInputs<'a> {
    pub me: &'a NodeId,
    pub my_incarnation: i64,
    /// Queued messages or a due run: an idle group is claimed by no one.
    pub has_work: bool,
    pub lease: LeaseSeen,
    /// Placement chose this node ([`super::placement::preferred_node`]).
    pub preferred: bool,
    /// How long this node has seen the lease free or expired (its own
    /// monotonic clock; zero when it just noticed).
    pub free_for: Duration,
    /// How long others wait for the preferred node ([`super::timing::LeaseTiming::grace`]).
    pub grace: Duration,
    pub free_slot: bool,
}

/// Whether to claim the group now.
pub fn decide(input: &ClaimInputs<'_>) -> ClaimDecision {
    if let LeaseSeen::Held { node, incarnation, holder_expired, .. } = &input.lease {
        if node == input.me && *incarnation == input.my_incarnation {
            return ClaimDecision::AlreadyMine;
        }
        if !holder_expired {
            return ClaimDecision::NotMine;
        }
    }
    if !input.has_work || !input.free_slot {
        return ClaimDecision::NotMine;
    }
    if input.preferred || input.free_for >= input.grace {
        return ClaimDecision::ClaimNow;
    }
    ClaimDecision::WaitGrace { left: input.grace - input.free_for }
}

/// The epoch a claim writes after `previous` (none: the group's first
/// claim). `None` once the epochs ran out, which at one claim a millisecond
/// takes 292 million years; the SQL errors out there too rather than wrap.
pub fn next_epoch(previous: Option<i64>) -> Option<i64> {
    match previous {
        None => Some(1),
        Some(epoch) => epoch.checked_add(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(5);

    fn id(s: &str) -> NodeId {
        NodeId::new(s).unwrap()
    }

    fn held(node: &str, incarnation: i64, holder_expired: bool) -> LeaseSeen {
        LeaseSeen::Held { node: id(node), incarnation, epoch: 7, holder_expired }
    }

    fn decide_for(lease: LeaseSeen, preferred: bool, free_for: Duration) -> ClaimDecision {
        let me = id("me");
        let input = ClaimInputs {
            me: &me,
            my_incarnation: 3,
            has_work: true,
            lease,
            preferred,
            free_for,
            grace: GRACE,
            free_slot: true,
        };
        decide(&input)
    }

    #[test]
    fn the_preferred_node_claims_a_free_or_expired_lease_at_once() {
        assert_eq!(decide_for(LeaseSeen::Free, true, Duration::ZERO), ClaimDecision::ClaimNow);
        assert_eq!(decide_for(held("other", 1, true), true, Duration::ZERO), ClaimDecision::ClaimNow);
    }

    #[test]
    fn another_node_waits_out_the_grace_then_claims() {
        let after_2s = decide_for(LeaseSeen::Free, false, Duration::from_secs(2));
        assert_eq!(after_2s, ClaimDecision::WaitGrace { left: Duration::from_secs(3) });
        assert_eq!(decide_for(held("other", 1, true), false, GRACE), ClaimDecision::ClaimNow);
        assert_eq!(decide_for(LeaseSeen::Free, false, GRACE * 3), ClaimDecision::ClaimNow);
    }

    #[test]
    fn a_live_holder_keeps_its_group_even_from_the_preferred_node() {
        assert_eq!(decide_for(held("other", 1, false), true, GRACE * 10), ClaimDecision::NotMine);
    }

    #[test]
    fn this_process_holding_it_is_already_mine_but_an_earlier_incarnation_is_not() {
        assert_eq!(decide_for(held("me", 3, false), false, Duration::ZERO), ClaimDecision::AlreadyMine);
        // Before a restart: the old process is gone once its row expired.
        assert_eq!(decide_for(held("me", 2, true), true, Duration::ZERO), ClaimDecision::ClaimNow);
        assert_eq!(decide_for(held("me", 2, false), true, Duration::ZERO), ClaimDecision::NotMine);
    }

    #[test]
    fn no_work_or_no_free_slot_means_no_claim() {
        let me = id("me");
        let base = ClaimInputs {
            me: &me,
            my_incarnation: 1,
            has_work: true,
            lease: LeaseSeen::Free,
            preferred: true,
            free_for: GRACE,
            grace: GRACE,
            free_slot: true,
        };
        assert_eq!(decide(&base), ClaimDecision::ClaimNow);
        assert_eq!(decide(&ClaimInputs { has_work: false, ..base.clone() }), ClaimDecision::NotMine);
        assert_eq!(decide(&ClaimInputs { free_slot: false, ..base }), ClaimDecision::NotMine);
    }

    #[test]
    fn epochs_start_at_one_grow_by_one_and_never_wrap() {
        assert_eq!(next_epoch(None), Some(1));
        assert_eq!(next_epoch(Some(41)), Some(42));
        assert_eq!(next_epoch(Some(i64::MAX - 1)), Some(i64::MAX));
        assert_eq!(next_epoch(Some(i64::MAX)), None);
    }
}
