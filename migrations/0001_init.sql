-- Pincer's store. Append-only: change the schema with a new migration file.
-- Times are unix microseconds (at_us). Every CLI frame we persist keeps its raw
-- JSON line, because the CLI's protocol drifts between versions.

CREATE TABLE groups (
    name          TEXT PRIMARY KEY NOT NULL,
    created_at_us INTEGER NOT NULL,
    -- The CLI session to --resume; NULL until the first turn, or after a reset.
    session_id    TEXT,
    -- JSON array of tool names for can_use_tool; NULL means the configured default.
    allowed_tools TEXT
);

CREATE TABLE inbound (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    group_name TEXT NOT NULL REFERENCES groups(name),
    at_us      INTEGER NOT NULL,
    source     TEXT NOT NULL,
    sender     TEXT NOT NULL,
    text       TEXT NOT NULL,
    -- queued -> sent -> answered, or failed when pincer gave up on it.
    state      TEXT NOT NULL DEFAULT 'queued'
);
CREATE INDEX inbound_by_group ON inbound (group_name, at_us);

CREATE TABLE results (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    group_name     TEXT NOT NULL REFERENCES groups(name),
    at_us          INTEGER NOT NULL,
    session_id     TEXT,
    subtype        TEXT NOT NULL,
    is_error       INTEGER NOT NULL,
    text           TEXT,
    total_cost_usd REAL,
    duration_ms    INTEGER,
    num_turns      INTEGER,
    origin         TEXT,
    raw            TEXT NOT NULL
);
CREATE INDEX results_by_group ON results (group_name, at_us);

CREATE TABLE task_frames (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    group_name  TEXT NOT NULL REFERENCES groups(name),
    at_us       INTEGER NOT NULL,
    session_id  TEXT,
    subtype     TEXT NOT NULL,
    task_id     TEXT,
    task_type   TEXT,
    status      TEXT,
    summary     TEXT,
    description TEXT,
    raw         TEXT NOT NULL
);
CREATE INDEX task_frames_by_group ON task_frames (group_name, at_us);

CREATE TABLE permission_decisions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    group_name  TEXT NOT NULL REFERENCES groups(name),
    at_us       INTEGER NOT NULL,
    tool_name   TEXT NOT NULL,
    tool_use_id TEXT,
    input       TEXT NOT NULL,
    allowed     INTEGER NOT NULL,
    message     TEXT,
    decided_by  TEXT NOT NULL
);

-- Process lifecycle: started, resumed, resume_failed, crashed, idle_closed, gave_up.
CREATE TABLE session_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    group_name TEXT NOT NULL REFERENCES groups(name),
    at_us      INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    session_id TEXT,
    detail     TEXT
);
