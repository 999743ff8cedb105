-- Chat channels: how a group engages, where its chat is, and who may approve tools.

-- NULL trigger: '@' followed by the configured assistant_name.
ALTER TABLE groups ADD COLUMN trigger TEXT;
-- 0: every message engages the agent (a private chat, a dedicated group).
ALTER TABLE groups ADD COLUMN requires_trigger INTEGER NOT NULL DEFAULT 1;
-- JSON array of channel user ids (strings) who may answer tool approvals.
ALTER TABLE groups ADD COLUMN admins TEXT;
-- 0 once the chat is gone for the bot (blocked, kicked, deleted); replies are
-- then stored but not sent, until the bot is back in the chat.
ALTER TABLE groups ADD COLUMN active INTEGER NOT NULL DEFAULT 1;
ALTER TABLE groups ADD COLUMN inactive_reason TEXT;

-- A group bound to a Telegram chat, or to one forum topic of it.
CREATE TABLE telegram_chats (
    group_name TEXT PRIMARY KEY NOT NULL REFERENCES groups(name),
    chat_id    INTEGER NOT NULL,
    -- NULL: the whole chat (every topic not bound to a group of its own).
    topic_id   INTEGER
);
CREATE UNIQUE INDEX telegram_chat_target ON telegram_chats (chat_id, COALESCE(topic_id, 0));

-- Chat messages carry who wrote them, when, and what they answered.
ALTER TABLE inbound ADD COLUMN sender_id TEXT;
ALTER TABLE inbound ADD COLUMN sent_at_us INTEGER;
ALTER TABLE inbound ADD COLUMN reply_to TEXT;
-- inbound.state gains 'observed' (seen in the chat but not addressed to the
-- agent) and 'included' (handed to the agent as context of a later message).
CREATE INDEX inbound_observed ON inbound (group_name, state) WHERE state = 'observed';

-- This turn's own cost: the CLI reports a total that grows over its process.
ALTER TABLE results ADD COLUMN cost_usd REAL;
