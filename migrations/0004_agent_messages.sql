-- Messages the agent posted itself through pincer's `send_message` tool, kept
-- like results so `pincer history` shows everything that went to the chat.
CREATE TABLE agent_messages (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The group whose chat received it.
    group_name TEXT NOT NULL REFERENCES groups(name),
    at_us      INTEGER NOT NULL,
    -- The group whose agent sent it (another group only for the main group).
    sent_by    TEXT NOT NULL,
    text       TEXT NOT NULL
);
CREATE INDEX agent_messages_by_group ON agent_messages (group_name, at_us);
