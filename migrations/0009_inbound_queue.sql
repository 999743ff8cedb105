-- The inbound table is the queue: sessions pull their group's queued rows in
-- id order. The partial index stays as small as the waiting rows, however
-- long the history grows (observed rows have theirs since 0002).
CREATE INDEX inbound_queued ON inbound (group_name, id) WHERE state = 'queued';
