-- Push for the change stamps: every bump of a stamp sends NOTIFY tw_stamps '<schema>:<name>:<stamp>',
-- which PostgreSQL delivers only when (and if) the bumping transaction commits. The API and stream
-- processes LISTEN on a dedicated connection and re-read the stamps at once (they also poll them
-- every 0.5 s, so a lost notification delays a change by at most that). The projector, the sweeper
-- and a rebuild's switch all bump stamps with UPDATE, so all of them notify through this trigger.

CREATE FUNCTION tw_stamp_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tw_stamps', TG_TABLE_SCHEMA || ':' || NEW.name || ':' || NEW.stamp);
    RETURN NULL;
END;
$$;

CREATE TRIGGER change_stamps_notify AFTER UPDATE ON change_stamps
    FOR EACH ROW WHEN (NEW.stamp IS DISTINCT FROM OLD.stamp) EXECUTE FUNCTION tw_stamp_notify();

-- 'posts': bumped by the projector whenever a listed post row (or its rendering) changes, so the
-- API's page cache can drop what it serves from memory.
INSERT INTO change_stamps (name, stamp) VALUES ('posts', 0) ON CONFLICT (name) DO NOTHING;
