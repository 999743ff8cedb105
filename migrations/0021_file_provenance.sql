-- Which files in a group's folder a turn steered by a member's words wrote
-- since the group's admins last approved a command (issue 44): the
-- approval prompt names them. One row per path, `seq` its order (newest
-- highest); the session keeps at most `session::provenance::MAX_ENTRIES`
-- rows per group (the newest), rewritten as a whole on each write and
-- deleted when an admin approves. `senders` are display names, one per
-- line (control characters are dropped from each before it is stored).
-- The same shape in migrations/postgres/0012_file_provenance.sql.

CREATE TABLE file_provenance (
    group_name TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    path       TEXT NOT NULL CHECK (length(path) <= 512),
    senders    TEXT NOT NULL CHECK (length(senders) <= 2048),
    PRIMARY KEY (group_name, seq)
);
