"""The stream's own statements (connection leases, in public). What it reads of the read model
(positions, announcements) it reads through :mod:`tickerwire.services.readmodel`."""

# --------------------------------------------------------------------------- connection slots

LOCK_WORKSPACE_SLOTS = "SELECT pg_advisory_xact_lock(hashtext('tickerwire.stream:' || $1))"

DELETE_EXPIRED_OF_WORKSPACE = "DELETE FROM public.stream_leases WHERE workspace_id = $1 AND expires_at <= now()"

# Run in one transaction after LOCK_WORKSPACE_SLOTS, for a group of one workspace's handshakes
# (session ids $2, each with its limit $3, in order): the n-th is granted when the workspace's live
# leases plus n stay within its limit, so the group never takes more than the limit. Returns the
# granted session ids.
INSERT_LEASES_IF_FREE = """
INSERT INTO public.stream_leases (session_id, workspace_id, holder, expires_at)
SELECT a.session_id, $1, $4, now() + make_interval(secs => $5)
FROM unnest($2::text[], $3::int[]) WITH ORDINALITY AS a(session_id, slot_limit, n)
WHERE a.n <= a.slot_limit - (SELECT count(*) FROM public.stream_leases WHERE workspace_id = $1 AND expires_at > now())
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
