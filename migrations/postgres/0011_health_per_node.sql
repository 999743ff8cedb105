-- A platform's health row per cluster node (issue 45), as SQLite's
-- migrations/0020_health_per_node.sql: each node's linked WhatsApp device
-- writes its own row (`node` its id); Telegram's bot, one connection served
-- by the gateway, keeps a shared row (`node` empty), as one machine does.

ALTER TABLE channel_health ADD COLUMN node TEXT NOT NULL DEFAULT '';
ALTER TABLE channel_health DROP CONSTRAINT channel_health_pkey;
ALTER TABLE channel_health ADD PRIMARY KEY (platform, node);
