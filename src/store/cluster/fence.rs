//! The SQL that claims a lease, checks it before every fenced write, and
//! releases it (the token itself is `cluster::Fence`). Text only: the store's
//! leases run these statements.
//!
//! This is Temporal's shard-ownership pattern (`range_id` checked under a
//! row lock in every write): each write that belongs to a group runs in a
//! transaction that first runs [`FENCE_CHECK`]. A claim bumps the epoch with
//! an `UPDATE` of the same row, which waits for every open fenced
//! transaction: so the new owner reads the group only after the old owner's
//! last write committed, and every later write of the old owner finds no row
//! and is rolled back.
//!
//! Times are unix microseconds by the database's clock, [`DB_NOW_US`]; the
//! schema is `migrations/postgres/0002_cluster.sql`.

/// Now, by the database's clock, in unix microseconds. `clock_timestamp()`,
/// not `now()`: `now()` is when the transaction began, which would judge
/// expiry by a stale clock in a long transaction.
pub const DB_NOW_US: &str = "(extract(epoch from clock_timestamp()) * 1000000)::bigint";

/// What every fenced write runs first, in its transaction; no row means this
/// node lost the lease: roll back, drop the CLI at once, forget the group.
/// `$1` lease name, `$2` node id, `$3` epoch.
///
/// `FOR SHARE`, not a plain read: the lock lasts until the transaction ends,
/// so a takeover's `UPDATE` of this row waits for the write to commit or roll
/// back; fenced writes of the holder share the lock and never wait for each
/// other. A plain read would let the takeover commit between the check and
/// the write.
pub const FENCE_CHECK: &str = "SELECT 1 FROM leases WHERE name = $1 AND node_id = $2 AND epoch = $3 FOR SHARE";

/// Claims a lease in one statement, returning the new epoch; no row: not
/// claimed. `$1` lease name, `$2` node id, `$3` the node's incarnation.
///
/// It claims only when the claimant's own row is alive (a node whose row
/// expired has no business claiming), and the lease is new, released
/// (`node_id IS NULL`), or its holder's incarnation has no live row by the
/// database's clock (expired, or replaced by a restart). The epoch starts at
/// 1 and grows by one at every claim; at `i64::MAX` PostgreSQL refuses the
/// overflow rather than wrap. A lease held by the claimant itself is not
/// claimed again. Two racing claimants: the second waits on the first's
/// row, then finds a live holder.
pub const CLAIM_LEASE: &str = "\
INSERT INTO leases AS l (name, node_id, incarnation, epoch, acquired_at_us)
SELECT $1, me.node_id, me.incarnation, 1, (extract(epoch from clock_timestamp()) * 1000000)::bigint
  FROM nodes me
 WHERE me.node_id = $2 AND me.incarnation = $3
   AND me.expires_at_us > (extract(epoch from clock_timestamp()) * 1000000)::bigint
ON CONFLICT (name) DO UPDATE
   SET node_id = EXCLUDED.node_id, incarnation = EXCLUDED.incarnation,
       epoch = l.epoch + 1, acquired_at_us = EXCLUDED.acquired_at_us
 WHERE l.node_id IS NULL
    OR NOT EXISTS (SELECT 1 FROM nodes holder
                    WHERE holder.node_id = l.node_id AND holder.incarnation = l.incarnation
                      AND holder.expires_at_us > (extract(epoch from clock_timestamp()) * 1000000)::bigint)
RETURNING epoch";

/// Gives a lease up (idle close, clean hand-off, shutdown after the CLI is
/// dead), so another node may claim it at once. The row and its epoch stay:
/// a deleted row would restart epochs at 1 and let an old token match again.
/// `$1` lease name, `$2` node id, `$3` epoch; no row: it was no longer ours.
pub const RELEASE_LEASE: &str = "\
UPDATE leases SET node_id = NULL, incarnation = NULL
 WHERE name = $1 AND node_id = $2 AND epoch = $3";

/// The groups with work (a message waiting or in flight, a schedule due, a
/// run unfinished, or a chat command handed to its owner) and their lease as seen now: `name`, the holder's
/// `node_id` and `incarnation` (NULL: free), `epoch` (NULL: never claimed),
/// and `holder_expired` (1: the holder's row is missing or expired by the
/// database's clock). A message in flight counts as work so that a dead
/// holder's groups move even when nothing new arrives.
pub const GROUPS_WITH_WORK: &str = "\
SELECT w.name, l.node_id, l.incarnation, l.epoch,
       CAST(CASE WHEN l.node_id IS NULL THEN 0
                 WHEN EXISTS (SELECT 1 FROM nodes h
                               WHERE h.node_id = l.node_id AND h.incarnation = l.incarnation
                                 AND h.expires_at_us > (extract(epoch from clock_timestamp()) * 1000000)::bigint)
                 THEN 0 ELSE 1 END AS BIGINT) AS holder_expired
  FROM (SELECT group_name AS name FROM inbound WHERE state IN ('queued', 'sent', 'preparing')
        UNION SELECT group_name FROM schedules
               WHERE status = 'active' AND next_run_us <= (extract(epoch from clock_timestamp()) * 1000000)::bigint
        UNION SELECT group_name FROM schedule_runs WHERE outcome = 'running'
        UNION SELECT group_name FROM pending_commands) w
  LEFT JOIN leases l ON l.name = w.name
 ORDER BY w.name";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Fence, LeaseName, NodeId};

    #[test]
    fn the_fence_binds_name_node_and_epoch_in_the_check_order() {
        let fence = Fence { lease: LeaseName::telegram(7), node: NodeId::new("n1").unwrap(), epoch: 3 };
        assert_eq!(fence.params(), ("gw:telegram:7", "n1", 3));
        assert!(FENCE_CHECK.ends_with("FOR SHARE"));
        let placeholders = |sql: &str| (1..=9).filter(|n| sql.contains(&format!("${n}"))).count();
        assert_eq!(placeholders(FENCE_CHECK), 3);
        assert_eq!(placeholders(RELEASE_LEASE), 3);
        assert_eq!(placeholders(CLAIM_LEASE), 3);
    }

    #[test]
    fn expiry_is_judged_by_the_database_clock_only() {
        assert_eq!(CLAIM_LEASE.matches(DB_NOW_US).count(), 3);
        assert_eq!(GROUPS_WITH_WORK.matches(DB_NOW_US).count(), 2);
        assert!(!GROUPS_WITH_WORK.contains("now()"));
        assert!(!CLAIM_LEASE.contains("now()"));
    }
}
