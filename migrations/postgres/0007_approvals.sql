-- Tool approvals across cluster nodes (issue 36): a session's tool call
-- that needs a person is asked by the node that owns the group, but shown
-- by the node holding the platform's gateway lease. The asking node writes
-- a row here and keeps the session's answer channel in memory; the gateway
-- marks the row shown under its lease's epoch, shows it, and writes the
-- person's verdict back (the first answer wins); the asking node reads the
-- verdict, answers its session and deletes the row. PostgreSQL only, like
-- 0002_cluster.sql (tests/postgres_harness.rs leaves it out of its
-- comparison); the statements are in src/store/approvals.rs, the bridge in
-- src/app/approvals/.
--
-- Times are unix microseconds by the database's clock, as in leases: a
-- row's expiry is judged by one clock for every node. The summary comes
-- from the agent's input (`session::permission::summarize`): the CHECKs
-- bound what a row may hold whatever a node writes.

CREATE TABLE approvals (
    id            BIGSERIAL PRIMARY KEY,
    group_name    TEXT NOT NULL CHECK (length(group_name) <= 64),
    -- Whose gateway shows it: 'telegram' or 'whatsapp'.
    platform      TEXT NOT NULL CHECK (platform IN ('telegram', 'whatsapp')),
    -- The node whose session waits for the answer.
    asked_by      TEXT NOT NULL CHECK (length(asked_by) <= 128),
    tool_name     TEXT NOT NULL CHECK (length(tool_name) <= 256),
    summary       TEXT NOT NULL CHECK (length(summary) <= 262144),
    asked_at_us   BIGINT NOT NULL,
    -- When the session stops waiting (asked_at_us + its approval timeout).
    expires_at_us BIGINT NOT NULL,
    -- The gateway showing it, and the epoch of its lease when it did: a
    -- later epoch (another holder, or the same node after a lapse) shows it again.
    shown_by      TEXT CHECK (length(shown_by) <= 128),
    shown_epoch   BIGINT,
    -- 'allow', 'deny' or 'always', and who pressed; NULL until answered.
    verdict       TEXT CHECK (verdict IN ('allow', 'deny', 'always')),
    answered_by   TEXT CHECK (length(answered_by) <= 512),
    CHECK ((verdict IS NULL) = (answered_by IS NULL))
);
-- The gateways' look for what to show.
CREATE INDEX approvals_unanswered ON approvals (platform, id) WHERE verdict IS NULL;
-- The asking nodes' look for their rows.
CREATE INDEX approvals_by_asker ON approvals (asked_by);

-- Wake-up hints (like 0005_hints.sql): a new row wakes the gateways, a
-- verdict wakes the asking node. Only hints: both also look every 250 ms.
-- Only cluster nodes write this table, so one machine never notifies.
CREATE FUNCTION pincer_hint_approvals() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('pincer_approvals', '');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER pincer_hint_approvals AFTER INSERT OR UPDATE OF verdict ON approvals
    FOR EACH STATEMENT EXECUTE FUNCTION pincer_hint_approvals();
