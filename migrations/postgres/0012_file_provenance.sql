-- Which files in a group's folder a turn steered by a member's words wrote
-- since the group's admins last approved a command (issue 44), as SQLite's
-- migrations/0021_file_provenance.sql.
--
-- And on a cluster node the words the prompt shows about them travel with
-- the approval's row (0007_approvals.sql) to the gateway that shows it,
-- bounded like the rest of the row (`store::approvals::MAX_PROVENANCE`).

CREATE TABLE file_provenance (
    group_name TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    path       TEXT NOT NULL CHECK (length(path) <= 512),
    senders    TEXT NOT NULL CHECK (length(senders) <= 2048),
    PRIMARY KEY (group_name, seq)
);

ALTER TABLE approvals ADD COLUMN provenance TEXT CHECK (length(provenance) <= 4096);
