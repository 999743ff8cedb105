-- Scheduled prompts, their run log, and the main group.

-- 1: this group's agent may act on other groups (target them by name, list them).
ALTER TABLE groups ADD COLUMN is_main INTEGER NOT NULL DEFAULT 0;

CREATE TABLE schedules (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    group_name    TEXT NOT NULL REFERENCES groups(name),
    created_at_us INTEGER NOT NULL,
    prompt        TEXT NOT NULL,
    -- cron (value: 5 fields, tz: an IANA zone), interval (value: humantime,
    -- e.g. "2h"), once (value: RFC 3339 in UTC).
    kind          TEXT NOT NULL,
    value         TEXT NOT NULL,
    tz            TEXT,
    -- group: into the group's live session; isolated: a fresh session per run.
    context_mode  TEXT NOT NULL,
    -- active, paused, completed (a spent once), cancelled.
    status        TEXT NOT NULL,
    -- NULL while nothing is due (paused, completed, a once that is running).
    next_run_us   INTEGER,
    last_run_us   INTEGER,
    -- Failed runs in a row; retries back off with it.
    failures      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX schedules_by_group ON schedules (group_name);

-- One row per run: written when it starts, completed when its turn ends.
CREATE TABLE schedule_runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id INTEGER NOT NULL REFERENCES schedules(id),
    group_name  TEXT NOT NULL REFERENCES groups(name),
    started_us  INTEGER NOT NULL,
    ended_us    INTEGER,
    duration_ms INTEGER,
    -- running, ok, error
    outcome     TEXT NOT NULL,
    -- The result's text, or what went wrong.
    text        TEXT,
    cost_usd    REAL
);
CREATE INDEX schedule_runs_by_schedule ON schedule_runs (schedule_id, id);

-- inbound.source gains 'scheduled': a due prompt, sent by pincer itself.
