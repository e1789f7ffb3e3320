-- 0009: protocol_usage — how often each peer calls each protocol, and how it went.
--
-- One counter row per (peer, protocol), upserted on every application call: cheap enough for the hot
-- path and enough to see which protocols earn their keep and which peers hit errors.
CREATE TABLE protocol_usage (
    peer          TEXT    NOT NULL CHECK (length(peer) > 0),
    protocol_hash TEXT    NOT NULL REFERENCES protocols (hash),
    -- Calls that produced a response / an error. Total calls are their sum; not stored twice.
    ok_count      INTEGER NOT NULL DEFAULT 0 CHECK (ok_count >= 0),
    error_count   INTEGER NOT NULL DEFAULT 0 CHECK (error_count >= 0),
    first_used_at TEXT    NOT NULL,
    last_used_at  TEXT    NOT NULL,
    PRIMARY KEY (peer, protocol_hash)
) STRICT;

-- "Usage of hash H across peers".
CREATE INDEX protocol_usage_by_protocol ON protocol_usage (protocol_hash);
