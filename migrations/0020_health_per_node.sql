-- A platform's health row per cluster node (issue 45): every node of a
-- cluster links a WhatsApp device of its own, so each writes its own row
-- (`node` its id) and `pincer status`, `doctor` and `whatsapp status` show
-- them all; a node's /readyz reads its own. Telegram's bot is one
-- connection, served by the gateway: its row stays shared (`node` empty),
-- as is every row on one machine. SQLite cannot change a primary key in
-- place, so the table is made anew with its rows.

CREATE TABLE channel_health_by_node (
    platform        TEXT NOT NULL,
    state           TEXT NOT NULL,
    detail          TEXT,
    linked_as       TEXT,
    changed_at_us   INTEGER NOT NULL,
    last_inbound_us INTEGER,
    -- Last, where PostgreSQL's ALTER TABLE puts it: both schemas one shape.
    node            TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (platform, node)
);

INSERT INTO channel_health_by_node (platform, state, detail, linked_as, changed_at_us, last_inbound_us, node)
    SELECT platform, state, detail, linked_as, changed_at_us, last_inbound_us, '' FROM channel_health;

DROP TABLE channel_health;

ALTER TABLE channel_health_by_node RENAME TO channel_health;
