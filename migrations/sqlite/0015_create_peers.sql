-- 0015: peers — who may present themselves to this agent, and what each may do.
--
-- One row per peer the operator declared (`parley peers add`). A peer proves who it is with an
-- API key: the key's public id finds the row, and the SHA-256 of the key's secret, compared in
-- constant time, decides. The secret itself is never stored; it is printed once, when the key is
-- made. A peer without a key (both columns NULL) is named by another credential (a client
-- certificate, a token's subject) and is declared here only for its grants.
--
-- A revoked peer keeps its row, so its id and key id are not handed out again and an audit can
-- still name it; the server refuses its key from the moment `revoked_at` is set.
CREATE TABLE peers (
    -- The operator's name for the peer; what conversations, usage and audit records name.
    id         TEXT NOT NULL PRIMARY KEY CHECK (length(id) > 0),
    -- The API key's public id (how a presented key is found); unique while it exists.
    key_id     TEXT UNIQUE CHECK (key_id IS NULL OR length(key_id) > 0),
    -- Lower-case hex SHA-256 of the key's secret.
    key_digest TEXT CHECK (key_digest IS NULL OR
                           (length(key_digest) = 64 AND key_digest NOT GLOB '*[^0-9a-f]*')),
    -- What the peer may do: a JSON object (negotiate, talk, capabilities, protocols), read by the
    -- server; the store keeps it without interpreting it.
    grants     TEXT NOT NULL CHECK (json_valid(grants) AND json_type(grants) = 'object'),
    -- When the operator declared the peer.
    created_at TEXT NOT NULL,
    -- When it was revoked; NULL while its key is honoured. Revoking again keeps the first time.
    revoked_at TEXT,
    -- A key is its id and its digest together, or nothing.
    CHECK ((key_id IS NULL) = (key_digest IS NULL))
) STRICT;
