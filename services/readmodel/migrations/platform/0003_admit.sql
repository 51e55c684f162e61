-- Group-committed admission: the database only counts. The access gates (key, suspension, badge)
-- are decided in each process from its in-memory principals (services/common/access.py), so
-- tw_access, which did both per request, is gone.
--
-- tw_admit(workspaces, wanted, rates, quotas) settles a whole batch of admissions, gathered by one
-- API process from all its concurrent requests, in one statement: for each workspace (one array
-- element each) it grants min(wanted, rate - used this UTC minute, quota - used this UTC day)
-- requests, at least 0, and adds the grant to both counters. It returns, per workspace, the grant
-- and both counts before it, so the caller hands out "used" values old+1, old+2, ... to its
-- requests in arrival order and refuses the rest (RATE_LIMITED when the minute is full, else
-- QUOTA_EXHAUSTED). Only granted requests are counted, in both windows; refused ones in neither.
--
-- Exactness across processes: each workspace's minute row, then its day row, is locked (inserted
-- or SELECT ... FOR UPDATE) before its grant is computed, in workspace order in every caller, so
-- concurrent batches of any number of processes serialize per workspace without deadlocks and
-- never grant beyond a limit. The database clock (now(), the transaction start) is the only clock.
--
-- Durability: the API runs this on a connection with synchronous_commit = off (the tables stay
-- logged). A PostgreSQL crash can forget the grants of the last few hundred milliseconds (up to
-- three wal_writer_delay), so a workspace may be admitted that many requests more in that minute
-- or day; nothing else is lost, and no transaction waits for a WAL flush while holding a counter
-- row's lock.

DROP FUNCTION IF EXISTS tw_access(text, boolean, integer, integer);

CREATE FUNCTION tw_admit(p_workspaces text[], p_wanted integer[], p_rates integer[], p_quotas integer[])
RETURNS TABLE (
    workspace_id   text,
    granted        integer,
    minute_before  integer,
    day_before     integer,
    minute_reset   bigint,            -- epoch seconds of the next UTC minute
    day_reset      bigint,            -- epoch seconds of the next UTC midnight
    db_now         double precision
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r        record;
    v_minute timestamptz := date_trunc('minute', now(), 'UTC');
    v_day    date := (now() AT TIME ZONE 'UTC')::date;
    v_m      integer;
    v_d      integer;
    v_new_m  integer;
    v_new_d  integer;
    v_grant  integer;
BEGIN
    minute_reset := extract(epoch FROM v_minute + interval '1 minute')::bigint;
    day_reset := extract(epoch FROM (v_day + 1)::timestamp AT TIME ZONE 'UTC')::bigint;
    db_now := extract(epoch FROM now());
    FOR r IN
        SELECT t.ws, t.n, t.rate, t.quota
          FROM unnest(p_workspaces, p_wanted, p_rates, p_quotas) AS t(ws, n, rate, quota)
         ORDER BY t.ws
    LOOP
        INSERT INTO public.usage_minute AS u (workspace_id, minute, count) VALUES (r.ws, v_minute, 0)
        ON CONFLICT (workspace_id, minute) DO NOTHING;
        GET DIAGNOSTICS v_new_m = ROW_COUNT;
        SELECT u.count INTO v_m FROM public.usage_minute u
         WHERE u.workspace_id = r.ws AND u.minute = v_minute FOR UPDATE;
        INSERT INTO public.usage_day AS d (workspace_id, day, count) VALUES (r.ws, v_day, 0)
        ON CONFLICT (workspace_id, day) DO NOTHING;
        GET DIAGNOSTICS v_new_d = ROW_COUNT;
        SELECT d.count INTO v_d FROM public.usage_day d
         WHERE d.workspace_id = r.ws AND d.day = v_day FOR UPDATE;

        v_grant := greatest(0, least(r.n, r.rate - v_m, r.quota - v_d));
        IF v_grant > 0 THEN
            UPDATE public.usage_minute u SET count = u.count + v_grant WHERE u.workspace_id = r.ws AND u.minute = v_minute;
            UPDATE public.usage_day d SET count = d.count + v_grant WHERE d.workspace_id = r.ws AND d.day = v_day;
        END IF;
        -- The first batch of a new window forgets windows that no transaction can still use.
        IF v_new_m > 0 THEN
            DELETE FROM public.usage_minute u WHERE u.workspace_id = r.ws AND u.minute < v_minute - interval '1 minute';
        END IF;
        IF v_new_d > 0 THEN
            DELETE FROM public.usage_day d WHERE d.workspace_id = r.ws AND d.day < v_day - 35;
        END IF;

        workspace_id := r.ws;
        granted := v_grant;
        minute_before := v_m;
        day_before := v_d;
        RETURN NEXT;
    END LOOP;
END;
$$;
