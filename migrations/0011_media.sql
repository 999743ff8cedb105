-- Media in and out (issue 22).

-- What an inbound message carries: a JSON array of `domain::media::Attachment`
-- (NULL: nothing), and the platform's album key (parts sharing it become one
-- message). A message with media to fetch is stored 'preparing': its group's
-- session takes nothing at or after it until it is 'queued' (order kept);
-- an album's other parts end 'merged' into the one that carries them all.
ALTER TABLE inbound ADD COLUMN media TEXT;
ALTER TABLE inbound ADD COLUMN album TEXT;
CREATE INDEX inbound_preparing ON inbound (group_name, id) WHERE state = 'preparing';

-- The images the model is shown with a message: pincer's own scaled and
-- encoded copy (never the bytes as sent, never read back from the group's
-- folder, which the agent can change), in the attachment order.
CREATE TABLE inbound_images (
    inbound_id INTEGER NOT NULL REFERENCES inbound(id),
    seq        INTEGER NOT NULL,
    media_type TEXT NOT NULL,
    data       BLOB NOT NULL,
    PRIMARY KEY (inbound_id, seq)
);

-- A file for a chat: pincer's copy in the data dir (made when the agent asked),
-- the name the chat shows, how it is sent (photo, audio, document) and its size.
-- The row's text is its caption.
ALTER TABLE outbox ADD COLUMN file_path TEXT;
ALTER TABLE outbox ADD COLUMN file_name TEXT;
ALTER TABLE outbox ADD COLUMN file_kind TEXT;
ALTER TABLE outbox ADD COLUMN file_bytes INTEGER;
