-- What each group's sandboxed code spent through the credential proxy, from
-- the `usage` of every response the API sent back (issue 34), priced by
-- pincer. One row per group and quarter hour (UTC): every time zone's
-- midnight falls on a quarter hour, so a day's or a month's sum is exact in
-- any zone. Kept apart from the history retention prunes.
CREATE TABLE proxy_spend (
    group_name            TEXT    NOT NULL,
    bucket_us             INTEGER NOT NULL,
    calls                 INTEGER NOT NULL DEFAULT 0,
    input_tokens          INTEGER NOT NULL DEFAULT 0,
    output_tokens         INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens     INTEGER NOT NULL DEFAULT 0,
    cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd              REAL    NOT NULL DEFAULT 0,
    PRIMARY KEY (group_name, bucket_us)
) WITHOUT ROWID;
