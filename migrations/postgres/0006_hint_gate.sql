-- Hints only where a node listens (issue 36): the triggers of
-- 0005_hints.sql announce work only once a cluster node ever registered (a
-- row in `nodes`), so one machine on PostgreSQL never pays for NOTIFY (a
-- transaction that notified serializes its commit with every other such
-- commit). A message stored to be prepared (`preparing`) is announced too:
-- the group's owner prepares it (src/media/preparer.rs), wherever it came in.

CREATE OR REPLACE FUNCTION pincer_hint_inbound() RETURNS trigger AS $$
BEGIN
    IF NEW.state IN ('queued', 'preparing') AND EXISTS (SELECT 1 FROM nodes) THEN
        PERFORM pg_notify('pincer_work', NEW.group_name);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION pincer_hint_outbox() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM nodes) THEN
        PERFORM pg_notify('pincer_outbox', '');
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
