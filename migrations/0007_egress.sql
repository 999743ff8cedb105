-- The egress proxy's decisions: every connection a group's agent asked for
-- (CONNECT or a plain HTTP request), whether it was let through, why, and how
-- many bytes went each way. Read by `pincer egress NAME`.
CREATE TABLE egress_decisions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    group_name   TEXT NOT NULL REFERENCES groups(name),
    -- When the request came in.
    at_us        INTEGER NOT NULL,
    -- When it was refused, or when its connection closed.
    closed_at_us INTEGER NOT NULL,
    -- connect (a tunnel, usually TLS) or http (one plain request forwarded).
    via          TEXT NOT NULL,
    host         TEXT NOT NULL,
    port         INTEGER NOT NULL,
    -- allowed, refused (by policy or address), or failed (allowed, but the
    -- destination could not be resolved or reached).
    verdict      TEXT NOT NULL,
    reason       TEXT,
    -- The vetted address pincer connected to.
    address      TEXT,
    -- Written to and read from the destination.
    bytes_up     INTEGER NOT NULL DEFAULT 0,
    bytes_down   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX egress_by_group ON egress_decisions (group_name, at_us);
