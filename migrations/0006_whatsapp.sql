-- WhatsApp: message ids to drop redeliveries, the ids pincer sent, and the
-- health of each chat platform's connection.

-- The platform's id of an inbound message, where it may deliver one twice
-- (WhatsApp after a reconnect). NULL where the platform never does.
ALTER TABLE inbound ADD COLUMN external_id TEXT;
CREATE UNIQUE INDEX inbound_external ON inbound (source, external_id) WHERE external_id IS NOT NULL;

-- Messages pincer sent, by their platform ids: a reply quoting one engages the
-- agent, and the bot never answers its own messages (on a personal number
-- its own posts come back as inbound messages).
CREATE TABLE sent_messages (
    platform   TEXT NOT NULL,
    chat       TEXT NOT NULL,
    message_id TEXT NOT NULL,
    at_us      INTEGER NOT NULL,
    PRIMARY KEY (platform, chat, message_id)
);

-- How a platform's connection is doing, written by the running pincer and read
-- by `pincer whatsapp status` and `pincer doctor` (other processes).
CREATE TABLE channel_health (
    platform        TEXT PRIMARY KEY NOT NULL,
    -- connected, disconnected, logged_out, banned, replaced, outdated, unlinked
    state           TEXT NOT NULL,
    detail          TEXT,
    -- The account pincer is linked as (a phone number), when known.
    linked_as       TEXT,
    changed_at_us   INTEGER NOT NULL,
    last_inbound_us INTEGER
);
