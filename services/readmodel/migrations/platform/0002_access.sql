-- Access gates, the per-minute rate limit and the daily quota, in one statement per request.
--
-- tw_access(key_hash, count, default_rate, default_quota) resolves a key's SHA-256 hash through
-- the gates in their documented order:
--   NOT_AUTHENTICATED    unknown or revoked key
--   WORKSPACE_SUSPENDED  workspace status 'suspended'
--   BADGE_MISSING        badge status 'missing' or 'unknown' (docs/api.md#badge-status)
-- and, when `count` is true (HTTP requests; the stream passes false), admits the request against
--   RATE_LIMITED         the workspace's fixed window of the current UTC minute
--   QUOTA_EXHAUSTED      the workspace's current UTC day
-- returning outcome 'OK' when everything passed. Only an admitted request is counted, in both
-- windows; a refused one (401, 403, 429) counts in neither. Both counters move in the calling
-- statement's transaction, minute row locked first, then the day row, so concurrent callers in any
-- number of processes serialize per workspace and never admit more than the limit. The database
-- clock (now(), the transaction start) is the only clock.
--
-- api_keys and workspaces are the read model's tables: they are deliberately unqualified and
-- resolve through the caller's search_path (the pools use "<read model schema>, public").

ALTER TABLE usage_minute SET (fillfactor = 70);
ALTER TABLE usage_day SET (fillfactor = 70);

CREATE FUNCTION tw_access(p_key_hash text, p_count boolean, p_default_rate integer, p_default_quota integer)
RETURNS TABLE (
    outcome                  text,
    key_hash                 text,
    workspace_id             text,
    rate_limit_per_minute    integer,  -- the workspace's own setting (null: the default applies)
    daily_quota              integer,
    stream_connection_limit  integer,
    rate_limit               integer,  -- effective limits and usage (only when counted)
    minute_used              integer,
    minute_reset             bigint,   -- epoch seconds of the next UTC minute
    quota                    integer,
    day_used                 integer,
    day_reset                bigint,   -- epoch seconds of the next UTC midnight
    db_now                   double precision
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    k        record;
    v_minute timestamptz := date_trunc('minute', now(), 'UTC');
    v_day    date := (now() AT TIME ZONE 'UTC')::date;
    v_rate   integer;
    v_quota  integer;
    v_fresh  boolean;
BEGIN
    SELECT ak.key_hash AS hash, ak.revoked_at, w.id, w.status, w.badge_status,
           w.rate_limit_per_minute AS rate, w.daily_quota AS quota, w.stream_connection_limit AS streams
      INTO k
      FROM api_keys ak JOIN workspaces w ON w.id = ak.workspace_id
     WHERE ak.key_hash = p_key_hash;

    IF NOT FOUND OR k.revoked_at IS NOT NULL THEN
        outcome := 'NOT_AUTHENTICATED';
        RETURN NEXT;
        RETURN;
    END IF;
    key_hash := k.hash;
    workspace_id := k.id;
    rate_limit_per_minute := k.rate;
    daily_quota := k.quota;
    stream_connection_limit := k.streams;
    IF k.status = 'suspended' THEN
        outcome := 'WORKSPACE_SUSPENDED';
    ELSIF k.badge_status IN ('missing', 'unknown') THEN
        outcome := 'BADGE_MISSING';
    ELSE
        outcome := 'OK';
    END IF;
    IF outcome <> 'OK' OR NOT p_count THEN
        RETURN NEXT;
        RETURN;
    END IF;

    v_rate := coalesce(k.rate, p_default_rate);
    v_quota := coalesce(k.quota, p_default_quota);
    rate_limit := v_rate;
    quota := v_quota;
    minute_reset := extract(epoch FROM v_minute + interval '1 minute')::bigint;
    day_reset := extract(epoch FROM (v_day + 1)::timestamp AT TIME ZONE 'UTC')::bigint;
    db_now := extract(epoch FROM now());

    -- Gate 4: a slot in this minute's window.
    INSERT INTO public.usage_minute AS u (workspace_id, minute, count)
    SELECT k.id, v_minute, 1 WHERE v_rate > 0
    ON CONFLICT (workspace_id, minute) DO UPDATE SET count = u.count + 1 WHERE u.count < v_rate
    RETURNING u.count, (u.xmax = 0) INTO minute_used, v_fresh;
    IF NOT FOUND THEN
        outcome := 'RATE_LIMITED';
        SELECT u.count INTO minute_used FROM public.usage_minute u WHERE u.workspace_id = k.id AND u.minute = v_minute;
        SELECT d.count INTO day_used FROM public.usage_day d WHERE d.workspace_id = k.id AND d.day = v_day;
        minute_used := coalesce(minute_used, 0);
        day_used := coalesce(day_used, 0);
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_fresh THEN
        -- First request of a new minute: forget windows that no transaction can still use.
        DELETE FROM public.usage_minute u WHERE u.workspace_id = k.id AND u.minute < v_minute - interval '1 minute';
    END IF;

    -- Gate 5: a request of today's quota; refusing it gives the minute slot back.
    INSERT INTO public.usage_day AS d (workspace_id, day, count)
    SELECT k.id, v_day, 1 WHERE v_quota > 0
    ON CONFLICT (workspace_id, day) DO UPDATE SET count = d.count + 1 WHERE d.count < v_quota
    RETURNING d.count, (d.xmax = 0) INTO day_used, v_fresh;
    IF NOT FOUND THEN
        outcome := 'QUOTA_EXHAUSTED';
        UPDATE public.usage_minute u SET count = u.count - 1
         WHERE u.workspace_id = k.id AND u.minute = v_minute
        RETURNING u.count INTO minute_used;
        SELECT d.count INTO day_used FROM public.usage_day d WHERE d.workspace_id = k.id AND d.day = v_day;
        day_used := coalesce(day_used, 0);
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_fresh THEN
        DELETE FROM public.usage_day d WHERE d.workspace_id = k.id AND d.day < v_day - 35;
    END IF;
    RETURN NEXT;
END;
$$;
