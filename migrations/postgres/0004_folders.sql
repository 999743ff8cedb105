-- The groups' folders of a cluster (issue 36): the latest snapshot of each
-- group's folder, taken by its owner when the session's CLI stops and put
-- in place by the node that claims the group next. PostgreSQL only, like
-- 0002_cluster.sql (tests/postgres_harness.rs leaves it out of its
-- comparison). The bytes are `workspace::encode`'s; the statements are in
-- src/store/folders.rs.

CREATE TABLE group_folders (
    group_name   TEXT PRIMARY KEY NOT NULL,
    -- When it was taken (pincer's clock) and by which node: what a node
    -- remembers having put in place, so it does not restore it twice.
    taken_at_us  BIGINT NOT NULL,
    taken_by     TEXT NOT NULL,
    bytes        BYTEA NOT NULL
);
