-- The CLI transcripts of a cluster's groups (issue 36): the bytes each
-- session's `<session id>.jsonl` gained, stored by the group's owner in the
-- same fenced transaction as the result they belong to, and written back
-- before `--resume` by the node that claims the group next. PostgreSQL only,
-- like 0002_cluster.sql (tests/postgres_harness.rs leaves it out of its
-- comparison). The statements are in src/store/transcripts.rs.
--
-- Chunks rather than one growing BYTEA: appending a row writes only the new
-- bytes, where updating one value rewrites (and logs) the whole transcript
-- at every turn. Chunks are contiguous: each starts where the previous one
-- ended (`start_at` = the previous `end_at`, checked as it is inserted).

CREATE TABLE transcript_chunks (
    group_name    TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    -- The chunk's byte range in the file: [start_at, end_at).
    start_at      BIGINT NOT NULL,
    end_at        BIGINT NOT NULL,
    bytes         BYTEA NOT NULL,
    stored_at_us  BIGINT NOT NULL,
    PRIMARY KEY (group_name, session_id, start_at),
    CHECK (start_at >= 0 AND end_at = start_at + length(bytes))
);
