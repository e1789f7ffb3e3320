-- 0007: negotiation_messages — the transcript of a negotiation.
--
-- The meta-protocol messages exchanged, in order, kept for audit and for debugging a peer that
-- misbehaves. Same shape as conversation_messages.
CREATE TABLE negotiation_messages (
    negotiation_id UUID        NOT NULL REFERENCES negotiations (id) ON DELETE CASCADE,
    -- Position in the transcript, starting at 1, assigned by the store from negotiations.last_seq.
    seq            BIGINT      NOT NULL CHECK (seq >= 1),
    direction      TEXT        NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    -- The meta-protocol message as JSON.
    message        JSONB       NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (negotiation_id, seq)
);
