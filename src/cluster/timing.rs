//! The cluster's clocks, all derived from one setting, `[cluster] lease_ttl`:
//! how often a node renews its row, how long before its row expires it stops
//! its CLIs (the margin), and how long a node that is not a group's preferred
//! one waits before claiming it (the grace). Pure: touches nothing.

use std::time::Duration;

/// `lease_ttl` when none is set: a dead node's groups move within about
/// this, and a database hiccup shorter than 4/5 of it costs nothing.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
/// Below this, one slow database round trip (a checkpoint, a failover of
/// PostgreSQL itself) would stop every CLI in the cluster.
pub const SHORTEST_LEASE_TTL: Duration = Duration::from_secs(2);
/// Above this, a dead node's groups stay unanswered for too long to be useful.
pub const LONGEST_LEASE_TTL: Duration = Duration::from_secs(600);

/// Why a `lease_ttl` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseTtlError {
    #[error(
        "[cluster] lease_ttl = {} is too short: set it to at least {} (the default is {}), \
         or a slow database round trip stops every session",
        show(*.0), show(SHORTEST_LEASE_TTL), show(DEFAULT_LEASE_TTL)
    )]
    TooShort(Duration),
    #[error(
        "[cluster] lease_ttl = {} is too long: set it to at most {} (the default is {}); \
         a dead node's groups wait this long to move",
        show(*.0), show(LONGEST_LEASE_TTL), show(DEFAULT_LEASE_TTL)
    )]
    TooLong(Duration),
}

fn show(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(d)
}

/// The durations the node's lease loop and guard work with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    lease_ttl: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self { lease_ttl: DEFAULT_LEASE_TTL }
    }
}

impl LeaseTiming {
    pub fn new(lease_ttl: Duration) -> Result<Self, LeaseTtlError> {
        if lease_ttl < SHORTEST_LEASE_TTL {
            return Err(LeaseTtlError::TooShort(lease_ttl));
        }
        if lease_ttl > LONGEST_LEASE_TTL {
            return Err(LeaseTtlError::TooLong(lease_ttl));
        }
        Ok(Self { lease_ttl })
    }

    /// How long after a renewal, by the database's clock, the node's row
    /// stays alive.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// How often a node renews its row: five tries per lease, so four
    /// failing in a row still leave the node alive.
    pub fn renew_every(&self) -> Duration {
        self.lease_ttl / 5
    }

    /// How long before its row can expire a node has killed its CLIs. The
    /// row expires `lease_ttl` after the renewal ran on the database, which
    /// is after the node sent it, so the node's deadline (send + ttl −
    /// margin) comes at least `margin` earlier. That margin has to cover the
    /// kill itself (the guard's timer waking, SIGKILL, exit) and the rate
    /// difference between this machine's monotonic clock and the database's
    /// clock over one ttl; both are milliseconds, so ttl/5 (2 s by default)
    /// is ample, while still leaving 3/5 of a ttl of slack before a healthy
    /// node's deadline bites between two renewals.
    pub fn margin(&self) -> Duration {
        self.lease_ttl / 5
    }

    /// How long a node's CLIs may run after the send of a renewal that
    /// succeeded.
    pub fn alive_after_renewal(&self) -> Duration {
        self.lease_ttl - self.margin()
    }

    /// How long a node that is not a group's preferred one waits, once the
    /// group's lease is free or expired, before it claims the group itself:
    /// long enough for the preferred node (which renews every ttl/5) to claim
    /// first, short enough that a group moves within 1.5 ttl when it cannot.
    pub fn grace(&self) -> Duration {
        self.lease_ttl / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_ttl_gives_the_documented_durations() {
        let t = LeaseTiming::default();
        assert_eq!(t, LeaseTiming::new(Duration::from_secs(10)).unwrap());
        assert_eq!(t.renew_every(), Duration::from_secs(2));
        assert_eq!(t.margin(), Duration::from_secs(2));
        assert_eq!(t.alive_after_renewal(), Duration::from_secs(8));
        assert_eq!(t.grace(), Duration::from_secs(5));
    }

    #[test]
    fn ttls_outside_two_seconds_to_ten_minutes_are_refused_saying_what_to_set() {
        assert!(LeaseTiming::new(SHORTEST_LEASE_TTL).is_ok());
        assert!(LeaseTiming::new(LONGEST_LEASE_TTL).is_ok());
        let short = LeaseTiming::new(Duration::from_millis(1500)).unwrap_err();
        assert_eq!(short, LeaseTtlError::TooShort(Duration::from_millis(1500)));
        assert!(short.to_string().contains("set it to at least 2s"), "{short}");
        let long = LeaseTiming::new(Duration::from_secs(601)).unwrap_err();
        assert!(long.to_string().contains("set it to at most 10m"), "{long}");
    }

    #[test]
    fn the_deadline_leaves_more_than_one_renewal_of_slack() {
        for secs in [2, 3, 10, 77, 600] {
            let t = LeaseTiming::new(Duration::from_secs(secs)).unwrap();
            assert!(t.alive_after_renewal() > t.renew_every() * 2, "{secs}");
            assert!(t.margin() > Duration::ZERO && t.grace() < t.lease_ttl());
        }
    }
}
