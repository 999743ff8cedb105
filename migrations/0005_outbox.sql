-- Chat platforms behind one boundary, and the durable outbox.

-- Where a group lives: one chat on one platform (and, on Telegram, maybe one
-- forum topic of it). The address is the platform's own, as text: a Telegram
-- chat id in decimal; other platforms bring their own format, not a new table.
CREATE TABLE chat_bindings (
    group_name TEXT PRIMARY KEY NOT NULL REFERENCES groups(name),
    platform   TEXT NOT NULL,
    chat       TEXT NOT NULL,
    -- NULL: the whole chat (every thread not bound to a group of its own).
    thread     TEXT
);
CREATE UNIQUE INDEX chat_binding_target ON chat_bindings (platform, chat, COALESCE(thread, ''));

INSERT INTO chat_bindings (group_name, platform, chat, thread)
SELECT group_name, 'telegram', CAST(chat_id AS TEXT), CAST(topic_id AS TEXT) FROM telegram_chats;
DROP TABLE telegram_chats;

-- Everything that goes to a chat, written before any send is tried: in the
-- same transaction as the result (or agent message) it carries.
CREATE TABLE outbox (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    group_name       TEXT NOT NULL REFERENCES groups(name),
    at_us            INTEGER NOT NULL,
    -- reply, error, notice
    kind             TEXT NOT NULL,
    text             TEXT NOT NULL,
    -- The chat it goes to, resolved when it was written (and moved with the
    -- group's binding while it waits): 'console' + the group name for a group
    -- without a chat.
    platform         TEXT NOT NULL,
    chat             TEXT NOT NULL,
    thread           TEXT,
    -- queued -> delivered, or failed (with last_error) when the platform
    -- refused it for good. A queued row of an inactive group waits for it.
    state            TEXT NOT NULL DEFAULT 'queued',
    -- Parts already delivered: a long text goes as several messages, and a
    -- part is never sent twice once it is counted here.
    parts_done       INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT,
    delivered_at_us  INTEGER,
    result_id        INTEGER REFERENCES results(id),
    agent_message_id INTEGER REFERENCES agent_messages(id)
);
CREATE INDEX outbox_queued ON outbox (platform, chat, thread, id) WHERE state = 'queued';
CREATE INDEX outbox_by_group ON outbox (group_name, at_us);
CREATE INDEX outbox_by_result ON outbox (result_id) WHERE result_id IS NOT NULL;
CREATE INDEX outbox_by_agent_message ON outbox (agent_message_id) WHERE agent_message_id IS NOT NULL;
