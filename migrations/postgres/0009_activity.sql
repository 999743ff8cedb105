-- What each group's agent is doing, mirrored by the node that runs it for
-- the node that serves its chat (issue 45: the status message, its Stop
-- button and "typing…" for every group, whichever node runs it). One row a
-- group, overwritten as the activity changes (fenced to the group's owner);
-- `body` is `domain::activity::wire`'s text, its times as ages at writing,
-- bounded here as there. `version` grows at each write so a reader skips
-- what it has seen. PostgreSQL only, like 0002_cluster.sql
-- (tests/postgres_harness.rs leaves it out of its comparison): one machine
-- shows its sessions' activity from memory. The statements are in
-- src/store/activity.rs.

CREATE TABLE group_activity (
    group_name     TEXT PRIMARY KEY,
    node           TEXT NOT NULL,
    version        BIGINT NOT NULL,
    body           TEXT NOT NULL CHECK (length(body) <= 16384),
    written_at_us  BIGINT NOT NULL DEFAULT (extract(epoch from clock_timestamp()) * 1000000)::bigint
);
