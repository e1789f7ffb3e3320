-- 0006: negotiations — one row per ANP meta-protocol negotiation.
--
-- A negotiation runs inside one NLIP conversation. The row is written when it starts and finished
-- exactly once with its outcome, so an operator can see what was negotiated, with whom, how it ended
-- and why; the messages themselves live in negotiation_messages.
CREATE TABLE negotiations (
    -- Minted by the store (UUID v4).
    id              UUID        NOT NULL PRIMARY KEY,
    -- The NLIP conversation carrying the negotiation.
    conversation_id TEXT        NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    -- Our role: 'requester' (we proposed) or 'provider' (we evaluated).
    role            TEXT        NOT NULL CHECK (role IN ('requester', 'provider')),
    -- The other party (agent id or address).
    peer            TEXT        NOT NULL CHECK (length(peer) > 0),
    -- Every outcome the meta-protocol can produce. 'negotiating' until finished.
    status          TEXT        NOT NULL DEFAULT 'negotiating'
                                CHECK (status IN ('negotiating', 'accepted', 'rejected', 'failed', 'timeout')),
    -- The agreed protocol. Required when accepted; may also be set when a negotiation failed after
    -- agreement (e.g. handler generation), which is exactly when an operator needs to know it.
    protocol_hash   TEXT        REFERENCES protocols (hash),
    -- Proposal rounds used, reported by the negotiator (the store does not interpret ANP messages).
    rounds          BIGINT      NOT NULL DEFAULT 0 CHECK (rounds >= 0),
    -- Sequence number of the newest transcript message (same scheme as conversations.last_seq).
    last_seq        BIGINT      NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    started_at      TIMESTAMPTZ NOT NULL,
    -- Set when finished, and only then.
    ended_at        TIMESTAMPTZ,
    -- Why it ended other than accepted: a stable error code or short explanation.
    reason          TEXT,
    CHECK ((status = 'negotiating') = (ended_at IS NULL)),
    CHECK (status <> 'accepted' OR protocol_hash IS NOT NULL)
);

-- "Negotiations that produced hash H"; most rows of a busy provider have a hash, the rest are skipped.
CREATE INDEX negotiations_by_protocol ON negotiations (protocol_hash) WHERE protocol_hash IS NOT NULL;
-- "Negotiations in conversation C", and the cascade from conversations.
CREATE INDEX negotiations_by_conversation ON negotiations (conversation_id);
