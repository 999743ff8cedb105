-- Chat commands handed to a group's owner (issue 36): a command (`/status`,
-- `/stop`, `/new`, `/tasks`, `/budget`, `/help`) arrives at the node that
-- receives the chat, but its answer is a write of the group's, fenced to
-- the node holding the group's lease; so a node that does not hold the group
-- stores the command here, and the owner takes it, runs it and answers.
-- `command` is the serialized closed set of `channel::SessionCommand`
-- (never free text that chooses anything); `asked_at_us` is by the
-- database's clock, so the owner judges its age without trusting another
-- node's clock. A pending command is work for its group
-- (`cluster::fence::GROUPS_WITH_WORK`), so an idle group is claimed to run
-- it. PostgreSQL only, like 0002_cluster.sql (tests/postgres_harness.rs
-- leaves it out of its comparison); the statements are in
-- src/store/commands.rs, the taker is src/app/commands.rs.

CREATE TABLE pending_commands (
    id           BIGSERIAL PRIMARY KEY,
    group_name   TEXT NOT NULL,
    command      TEXT NOT NULL,
    by_admin     BIGINT NOT NULL DEFAULT 0,
    asked_at_us  BIGINT NOT NULL DEFAULT (extract(epoch from clock_timestamp()) * 1000000)::bigint
);

-- The owner's look is by group (and the work query's by name).
CREATE INDEX pending_commands_group ON pending_commands (group_name, id);

-- A hint to the nodes, gated like 0006_hint_gate.sql: the claim loop and the
-- taker wake at once rather than at their next tick.
CREATE FUNCTION pincer_hint_commands() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM nodes) THEN
        PERFORM pg_notify('pincer_work', NEW.group_name);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER pincer_hint_commands AFTER INSERT ON pending_commands
    FOR EACH ROW EXECUTE FUNCTION pincer_hint_commands();
