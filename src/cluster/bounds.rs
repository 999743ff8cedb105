//! How long anything may wait on PostgreSQL, all derived from `[cluster]
//! lease_ttl` (issue 45). Pure: touches nothing; the store sets these on
//! every pooled connection and bounds its own waits with them.
//!
//! The danger they bound: a node that freezes, dies or loses its network
//! inside a fenced transaction keeps its row locks (`FOR SHARE` on a lease,
//! the rows it wrote), and a takeover's `UPDATE` of that lease waits for
//! them. Left alone that is as long as the freeze, or about two hours for a
//! dead peer (the server's default keepalive). So:
//! - the server ends a session idle inside a transaction after half a ttl,
//!   and a dead or cut-off peer's connection within about a ttl (TCP
//!   keepalives, `tcp_user_timeout`): its locks go with it, before its row
//!   can even expire (a ttl after its last renewal), so a takeover that is
//!   due never waits on them;
//! - a claim waits for a locked lease row at most [`PgBounds::claim_lock_wait`]
//!   and then skips the group for this round (the holder is mid-write, or
//!   frozen: the next round tries again), so one stuck row holds up no other
//!   group's claim;
//! - on the node, each claim and each cluster statement is given up after a
//!   bound of its own, and so is a fenced write, so a server that stops
//!   answering never hangs a node's loops for good.

use std::time::Duration;

use super::timing::LeaseTiming;

/// The waits on PostgreSQL of a node with one `lease_ttl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PgBounds {
    timing: LeaseTiming,
}

impl PgBounds {
    pub fn new(timing: LeaseTiming) -> Self {
        Self { timing }
    }

    fn ttl(&self) -> Duration {
        self.timing.lease_ttl()
    }

    /// `idle_in_transaction_session_timeout`: half a ttl. A node's fenced
    /// transactions send their statements back to back (milliseconds apart),
    /// so only a frozen, dead or cut-off node idles this long inside one;
    /// its session (and locks) end before its row can expire, a ttl after
    /// its last renewal.
    pub fn idle_in_transaction(&self) -> Duration {
        self.ttl() / 2
    }

    /// `statement_timeout`: two ttls. A backstop: a statement of a live node
    /// that waits longer than that (on a lock of a peer that is active but
    /// stuck) is past its node's lease anyway. Twice, not once, so that a
    /// statement waiting on a frozen peer's lock is freed by that peer's
    /// session ending (half a ttl) rather than failing itself, and the
    /// batched retention and history reads have room.
    pub fn statement_timeout(&self) -> Duration {
        self.ttl() * 2
    }

    /// `tcp_keepalives_idle`, in whole seconds (at least 1): a third of a ttl.
    pub fn keepalive_idle_secs(&self) -> u64 {
        (self.ttl() / 3).as_secs().max(1)
    }

    /// `tcp_keepalives_interval`, in whole seconds (at least 1): a sixth of a ttl.
    pub fn keepalive_interval_secs(&self) -> u64 {
        (self.ttl() / 6).as_secs().max(1)
    }

    /// `tcp_keepalives_count`: unanswered probes before the server drops a peer.
    pub fn keepalive_count(&self) -> u64 {
        3
    }

    /// `tcp_user_timeout`: how long data the server sent may stay
    /// unacknowledged before it drops the connection (a peer gone while the
    /// server was answering it): half a ttl.
    pub fn tcp_user_timeout(&self) -> Duration {
        self.ttl() / 2
    }

    /// How long after a peer stops answering an idle connection the server
    /// drops it, by its keepalives.
    pub fn dead_peer_dropped_within(&self) -> Duration {
        Duration::from_secs(self.keepalive_idle_secs() + self.keepalive_interval_secs() * self.keepalive_count())
    }

    /// `lock_timeout` of a claim's transaction: a tenth of a ttl, between
    /// 100 ms and 1 s. A healthy holder's fenced write holds the lease row
    /// for milliseconds; longer means it is stuck, and the claim skips the
    /// group this round instead of holding up the claims after it.
    pub fn claim_lock_wait(&self) -> Duration {
        (self.ttl() / 10).clamp(Duration::from_millis(100), Duration::from_secs(1))
    }

    /// How long the node waits for one claim (its statement, its takeover,
    /// its commit) before giving it up for this round: half a ttl. A claim
    /// whose commit landed but whose answer was lost is found by the next
    /// round's look for ghost leases (`cluster::ghost`).
    pub fn claim_within(&self) -> Duration {
        self.ttl() / 2
    }

    /// How long the node waits for any one cluster statement or fenced write
    /// (and for a connection from its pools) before giving it up: one ttl.
    /// Past that the node's lease may have lapsed anyway; giving up lets the
    /// loops go on (and a lapse register again) once the server answers.
    pub fn client_wait(&self) -> Duration {
        self.ttl()
    }

    /// The session settings every pooled connection runs with, as one
    /// statement list (`SET` takes no parameters; every value here is a
    /// number this type made).
    pub fn session_settings(&self) -> String {
        format!(
            "SET idle_in_transaction_session_timeout = {}; SET statement_timeout = {}; \
             SET tcp_keepalives_idle = {}; SET tcp_keepalives_interval = {}; \
             SET tcp_keepalives_count = {}; SET tcp_user_timeout = {}",
            self.idle_in_transaction().as_millis(),
            self.statement_timeout().as_millis(),
            self.keepalive_idle_secs(),
            self.keepalive_interval_secs(),
            self.keepalive_count(),
            self.tcp_user_timeout().as_millis(),
        )
    }

    /// The value of a claim's `lock_timeout` (`set_config` takes a string).
    pub fn claim_lock_wait_setting(&self) -> String {
        format!("{}ms", self.claim_lock_wait().as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::timing::{LONGEST_LEASE_TTL, SHORTEST_LEASE_TTL};

    fn at(secs: u64) -> PgBounds {
        PgBounds::new(LeaseTiming::new(Duration::from_secs(secs)).unwrap())
    }

    #[test]
    fn the_default_ttl_gives_the_documented_bounds() {
        let b = PgBounds::default();
        assert_eq!(b, at(10));
        assert_eq!(b.idle_in_transaction(), Duration::from_secs(5));
        assert_eq!(b.statement_timeout(), Duration::from_secs(20));
        assert_eq!((b.keepalive_idle_secs(), b.keepalive_interval_secs(), b.keepalive_count()), (3, 1, 3));
        assert_eq!(b.tcp_user_timeout(), Duration::from_secs(5));
        assert_eq!(b.claim_lock_wait(), Duration::from_secs(1));
        assert_eq!(b.claim_within(), Duration::from_secs(5));
        assert_eq!(b.client_wait(), Duration::from_secs(10));
    }

    #[test]
    fn a_frozen_holders_locks_go_before_its_row_can_expire() {
        for secs in [2, 3, 10, 77, 600] {
            let b = at(secs);
            let ttl = Duration::from_secs(secs);
            assert!(b.idle_in_transaction() < ttl, "{secs}");
            assert!(b.tcp_user_timeout() < ttl, "{secs}");
            assert!(b.statement_timeout() > b.idle_in_transaction(), "{secs}: frees a waiter before failing it");
        }
    }

    #[test]
    fn a_dead_peer_is_dropped_within_about_a_ttl() {
        for ttl in [SHORTEST_LEASE_TTL, Duration::from_secs(3), Duration::from_secs(10), LONGEST_LEASE_TTL] {
            let b = PgBounds::new(LeaseTiming::new(ttl).unwrap());
            assert!(b.dead_peer_dropped_within() <= ttl + Duration::from_secs(2), "{ttl:?}");
            assert!(b.keepalive_idle_secs() >= 1 && b.keepalive_interval_secs() >= 1);
        }
    }

    #[test]
    fn a_claim_waits_briefly_for_a_locked_row_and_the_node_for_the_claim() {
        assert_eq!(at(2).claim_lock_wait(), Duration::from_millis(200));
        assert_eq!(at(600).claim_lock_wait(), Duration::from_secs(1));
        for secs in [2, 3, 10, 600] {
            let b = at(secs);
            assert!(b.claim_lock_wait() < b.claim_within() && b.claim_within() <= b.client_wait(), "{secs}");
        }
        assert_eq!(at(3).claim_lock_wait_setting(), "300ms");
    }

    #[test]
    fn the_session_settings_name_every_bound_in_the_servers_units() {
        let sql = at(3).session_settings();
        for part in [
            "idle_in_transaction_session_timeout = 1500",
            "statement_timeout = 6000",
            "tcp_keepalives_idle = 1",
            "tcp_keepalives_interval = 1",
            "tcp_keepalives_count = 3",
            "tcp_user_timeout = 1500",
        ] {
            assert!(sql.contains(part), "{part} in {sql}");
        }
    }
}
