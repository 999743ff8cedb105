-- The cluster's tables (issue 36): which nodes are alive, and which node
-- holds which lease (a group, or a gateway: `gw:telegram:<bot id>`,
-- `gw:whatsapp:<number>`). PostgreSQL only: only a store on PostgreSQL is
-- shared by several nodes, so SQLite's migrations have no twin of this file
-- and tests/postgres_harness.rs leaves these two tables out of its
-- comparison. The statements that use them are in src/cluster/ (fence.rs,
-- membership.rs).
--
-- Times are unix microseconds by the DATABASE's clock, written as
-- (extract(epoch from clock_timestamp()) * 1000000)::bigint: BIGINT rather
-- than timestamptz because sqlx's Any driver decodes no timestamptz and the
-- store keeps every other time as *_at_us; the database's clock because
-- every node then judges every other by one clock, so skewed machine clocks
-- never make two nodes disagree on who is alive.

CREATE TABLE nodes (
    node_id        TEXT PRIMARY KEY NOT NULL,
    -- Grows by one at each registration (each start of `pincer run`, and
    -- after a lapsed deadline): a lease taken by an earlier incarnation
    -- belongs to a process that is gone.
    incarnation    BIGINT NOT NULL,
    started_at_us  BIGINT NOT NULL,
    renewed_at_us  BIGINT NOT NULL,
    -- renewed_at_us + lease_ttl: alive while the database's clock is before it.
    expires_at_us  BIGINT NOT NULL,
    -- Sessions this node may run at once, and runs now (as of its last
    -- renewal): placement's load. The gateways a node holds are not copied
    -- here: they are its `gw:` rows in leases, which cannot disagree.
    slots          BIGINT NOT NULL,
    live           BIGINT NOT NULL DEFAULT 0
);

-- One row per lease ever claimed; never deleted, so epochs only grow.
-- No foreign key to nodes: a decommissioned node's row may be deleted, and
-- its leases then simply count as expired.
CREATE TABLE leases (
    name           TEXT PRIMARY KEY NOT NULL,
    -- The holder, or both NULL when released (free to claim at once).
    node_id        TEXT,
    incarnation    BIGINT,
    -- Grows by one at every claim: the fencing token's epoch.
    epoch          BIGINT NOT NULL,
    acquired_at_us BIGINT NOT NULL,
    CHECK ((node_id IS NULL) = (incarnation IS NULL)),
    CHECK (epoch >= 1)
);
-- `pincer status` (who owns what) and a node dropping its leases.
CREATE INDEX leases_by_holder ON leases (node_id, incarnation);
