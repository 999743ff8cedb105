-- Where a file the agent sent was in its group's folder (relative), so the
-- terminal and `pincer history` can say where to find it. Shown only, never
-- used as a path: the copy in `file_path` is what is sent.
ALTER TABLE outbox ADD COLUMN file_from TEXT;
