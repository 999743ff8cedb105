//! The SQL of a node's own row in `nodes`: register (a new incarnation),
//! renew, leave. Pure: touches nothing; the node's lease task runs these and
//! feeds the answers to [`crate::cluster::Deadline`].
//!
//! A row is alive while the database's clock is before its `expires_at_us`;
//! every node judges every other node by that one clock, so skewed machine
//! clocks never disagree on who is alive. A lease belongs to one incarnation
//! (`node_id`, `incarnation`): a restarted node is a new incarnation, so the
//! leases of the process before it count as expired the moment it registers.

/// Registers this process as a new incarnation of its node; returns the
/// incarnation (1 for a new node). `$1` node id, `$2` slots, `$3` lease_ttl
/// in µs, `$4` the incarnation this process held before (after its deadline
/// lapsed), or 0. Stamp it like a renewal (`Deadline::renewal_sent`): its
/// success starts a fresh `Deadline`, the new incarnation's.
///
/// No row: another process with this node id is alive (two machines with one
/// host name: set `[cluster] node_id`), or this node's previous process
/// stopped less than `lease_ttl` ago without leaving; try again once its row
/// expired. Taking over a live row of someone else would void its leases
/// while its CLIs still run.
pub const REGISTER_NODE: &str = "\
INSERT INTO nodes AS n (node_id, incarnation, started_at_us, renewed_at_us, expires_at_us, slots, live)
SELECT $1, 1, t.now_us, t.now_us, t.now_us + $3, $2, 0
  FROM (SELECT (extract(epoch from clock_timestamp()) * 1000000)::bigint AS now_us) t
ON CONFLICT (node_id) DO UPDATE
   SET incarnation = n.incarnation + 1, started_at_us = EXCLUDED.started_at_us,
       renewed_at_us = EXCLUDED.renewed_at_us, expires_at_us = EXCLUDED.expires_at_us,
       slots = EXCLUDED.slots, live = 0
 WHERE n.expires_at_us <= EXCLUDED.started_at_us OR n.incarnation = $4
RETURNING incarnation";

/// Renews this incarnation's row, saying how many sessions run here.
/// `$1` node id, `$2` incarnation, `$3` lease_ttl in µs, `$4` live sessions.
/// One row updated: renewed. None: the row expired (or a newer incarnation
/// replaced it), and an expired row is never revived, since another node may
/// already have claimed its leases: register again.
pub const RENEW_NODE: &str = "\
UPDATE nodes SET renewed_at_us = t.now_us, expires_at_us = t.now_us + $3, live = $4
  FROM (SELECT (extract(epoch from clock_timestamp()) * 1000000)::bigint AS now_us) t
 WHERE node_id = $1 AND incarnation = $2 AND expires_at_us > t.now_us";

/// Ends this incarnation at once (clean shutdown, after its CLIs are dead):
/// other nodes may claim its leases without waiting for the ttl, and its next
/// start registers without waiting either. `$1` node id, `$2` incarnation.
pub const LEAVE: &str = "\
UPDATE nodes SET expires_at_us = (extract(epoch from clock_timestamp()) * 1000000)::bigint
 WHERE node_id = $1 AND incarnation = $2";

/// The live nodes placement chooses among: `node_id`, `live`, `slots`.
pub const LIVE_NODES: &str = "\
SELECT node_id, live, slots FROM nodes
 WHERE expires_at_us > (extract(epoch from clock_timestamp()) * 1000000)::bigint
 ORDER BY node_id";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::cluster::fence::DB_NOW_US;

    #[test]
    fn every_statement_judges_time_by_the_database_clock() {
        for sql in [REGISTER_NODE, RENEW_NODE, LEAVE, LIVE_NODES] {
            assert!(sql.contains(DB_NOW_US), "{sql}");
            assert!(!sql.contains("now()"), "{sql}");
        }
    }
}
