-- Wake-up hints between cluster nodes (issue 36): a message stored for a
-- group, or a reply written to the outbox, is announced on a channel the
-- nodes LISTEN to, so the group's owner takes it (and the gateway sends
-- it) at once rather than at its next look. Only a hint: every node still
-- looks every half second, so a hint lost (a node reconnecting) costs that
-- much, never a message. PostgreSQL only; tests/postgres_harness.rs leaves
-- these triggers out of its comparison (they have no SQLite twin: one
-- machine wakes its own sessions in memory). The listener is
-- src/app/hints.rs.

CREATE FUNCTION pincer_hint_inbound() RETURNS trigger AS $$
BEGIN
    IF NEW.state = 'queued' THEN
        PERFORM pg_notify('pincer_work', NEW.group_name);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER pincer_hint_inbound AFTER INSERT OR UPDATE OF state ON inbound
    FOR EACH ROW EXECUTE FUNCTION pincer_hint_inbound();

CREATE FUNCTION pincer_hint_outbox() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('pincer_outbox', '');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER pincer_hint_outbox AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION pincer_hint_outbox();
