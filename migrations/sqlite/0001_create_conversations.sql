-- 0001: conversations — one row per NLIP conversation.
--
-- An NLIP conversation is named by a `conversation` token submessage (ECMA-430 §6.2) that the server
-- mints and every peer echoes. The store never mints it: the caller passes the token in, so its format
-- stays the server's business and this table treats it as an opaque string.
--
-- Conventions for every SQLite table in Parley:
--   * STRICT tables, so a wrongly typed bind is an error instead of a silently stored surprise.
--   * Timestamps are RFC 3339 UTC text written by the application (microsecond precision, the same
--     precision PostgreSQL keeps), never `CURRENT_TIMESTAMP`, so both backends hold identical values.
--   * JSON documents are TEXT guarded by `json_valid`.
--   * Enumerations are TEXT guarded by CHECK constraints; the Rust enums own the spelling.
CREATE TABLE conversations (
    -- The conversation token exactly as it travels on the wire.
    id          TEXT    NOT NULL PRIMARY KEY CHECK (length(id) > 0),
    -- Who is on the other end (remote address, agent id) when known; for audits and per-peer views.
    peer        TEXT,
    -- The caller's per-conversation state: a JSON document the store stores but never interprets.
    state       TEXT    NOT NULL CHECK (json_valid(state)),
    -- Optimistic-concurrency counter for `state`. Every state write names the version it read and
    -- bumps it; a writer holding a stale version gets a conflict instead of overwriting a newer state.
    version     INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
    -- Sequence number of the newest message in the log (0 = empty log). Appending bumps this counter
    -- and inserts the message in one transaction, so sequence numbers are handed out under this row's
    -- write lock: consecutive, never duplicated, and without a racy `MAX(seq) + 1`.
    last_seq    INTEGER NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    -- When the server first saw the conversation.
    created_at  TEXT    NOT NULL,
    -- Last activity (message appended, state written, explicit touch): lets an operator expire idle
    -- conversations.
    updated_at  TEXT    NOT NULL
) STRICT;

-- Expiry sweeps look for conversations idle since a given instant.
CREATE INDEX conversations_by_updated_at ON conversations (updated_at);
