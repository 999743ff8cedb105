-- Live progress (issue 21).

-- A group's own progress mode: 'off' | 'status' | 'verbose'; NULL: the
-- configured default ([progress] mode).
ALTER TABLE groups ADD COLUMN progress TEXT;

-- The status messages pincer has posted and may still edit or delete, so a
-- pincer that stops mid-turn finds them at its next start and says so in the
-- chat instead of leaving them saying "working". A row goes when its message
-- is deleted or finished (turned into a summary).
CREATE TABLE status_messages (
    platform   TEXT NOT NULL,
    chat       TEXT NOT NULL,
    thread     TEXT,
    message_id TEXT NOT NULL,
    group_name TEXT NOT NULL,
    -- The turn's number in its session; NULL for the background line.
    turn       INTEGER,
    at_us      INTEGER NOT NULL,
    PRIMARY KEY (platform, chat, message_id)
);
