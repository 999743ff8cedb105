-- Chat commands seen on a cluster (issue 45): on WhatsApp every node's
-- linked device receives every message, and a command is not stored as a
-- message is; so the first node to see one runs it (or hands it to the
-- group's owner through pending_commands) and the others leave it, whether
-- or not any node holds the number's gateway lease just then. A command
-- sent while no node holds it waits like a message: its answer goes to the
-- outbox, which the next holder sends. `seen_key` is the platform's own id
-- of the message (bounded); rows older than a day are pruned as new ones
-- come. PostgreSQL only (tests/postgres_harness.rs leaves it out of its
-- comparison): one machine's device acts on what it receives by itself. The
-- statements are in src/store/commands.rs.

CREATE TABLE seen_commands (
    seen_key    TEXT PRIMARY KEY CHECK (length(seen_key) <= 512),
    seen_at_us  BIGINT NOT NULL DEFAULT (extract(epoch from clock_timestamp()) * 1000000)::bigint
);

CREATE INDEX seen_commands_at ON seen_commands (seen_at_us);
