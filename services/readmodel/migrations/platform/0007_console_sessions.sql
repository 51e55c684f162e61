-- Partner console sessions (docs/console.md): a partner signs in with a key and gets a short-lived
-- session instead, held by the browser in an HttpOnly cookie. Only hashes are stored: the
-- SHA-256 of the session token (the cookie), of its CSRF token, and of the key it stands for
-- (the key's identity in the access tables), so a copy of this table authenticates nobody.
-- A session ends at `expires_at` (absolute, never renewed) or when signed out (row deleted);
-- expired rows are deleted (up to 100 at a time) whenever a session is created.
CREATE TABLE console_sessions (
    token_hash    text        PRIMARY KEY,
    csrf_hash     text        NOT NULL,
    key_hash      text        NOT NULL,
    workspace_id  text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);

-- Single-use tickets by which a console session opens a stream connection (a browser cannot
-- set an Authorization header on a WebSocket, and the page never holds the key): the SHA-256 of
-- the ticket, its session, and a short end. Redeeming deletes the row; ending the session
-- deletes its tickets.
CREATE TABLE console_stream_tickets (
    ticket_hash  text        PRIMARY KEY,
    token_hash   text        NOT NULL REFERENCES console_sessions (token_hash) ON DELETE CASCADE,
    expires_at   timestamptz NOT NULL
);
CREATE INDEX console_stream_tickets_session ON console_stream_tickets (token_hash);
CREATE INDEX console_stream_tickets_expiry ON console_stream_tickets (expires_at);
