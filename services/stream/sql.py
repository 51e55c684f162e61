"""Every statement the stream process runs. Plain SQL; read-model tables are unqualified
(the pool's search_path is ``rm,public``), the stream's own state lives in public."""

# --------------------------------------------------------------------------- the feed

SELECT_POSITIONS = "SELECT partition, next_offset FROM positions WHERE topic = $1"

# The translations that the given log records first made visible, as stored by the projector.
SELECT_ANNOUNCED = """
SELECT t.lean, t.announced_partition, t.announced_offset, t.lang, t.tickers, t.category_slugs
FROM post_translations t
JOIN unnest($1::bigint[], $2::integer[], $3::bigint[]) AS e(post_id, partition, "offset")
  ON t.post_id = e.post_id AND t.announced_partition = e.partition AND t.announced_offset = e."offset"
WHERE t.visible
ORDER BY t.announced_partition, t.announced_offset, t.lang
"""

# --------------------------------------------------------------------------- connection slots

# Run in one transaction after LOCK_WORKSPACE_SLOTS: counts the workspace's live leases and
# takes one only when it is below the limit. Returns a row when the slot was granted.
LOCK_WORKSPACE_SLOTS = "SELECT pg_advisory_xact_lock(hashtext('tickerwire.stream:' || $1))"

DELETE_EXPIRED_OF_WORKSPACE = "DELETE FROM public.stream_leases WHERE workspace_id = $1 AND expires_at <= now()"

INSERT_LEASE_IF_FREE = """
INSERT INTO public.stream_leases (session_id, workspace_id, holder, expires_at)
SELECT $2, $1, $3, now() + make_interval(secs => $4)
WHERE (SELECT count(*) FROM public.stream_leases WHERE workspace_id = $1 AND expires_at > now()) < $5
RETURNING session_id
"""

# One statement per process and period, for every connection it holds. A session missing
# from the result has lost its lease (it expired and may have been taken by another client).
RENEW_LEASES = """
UPDATE public.stream_leases SET expires_at = now() + make_interval(secs => $2)
WHERE session_id = ANY($1::text[]) AND expires_at > now()
RETURNING session_id
"""

RELEASE_LEASES = "DELETE FROM public.stream_leases WHERE session_id = ANY($1::text[])"

DELETE_EXPIRED_LEASES = "DELETE FROM public.stream_leases WHERE expires_at <= now() - interval '1 minute'"
