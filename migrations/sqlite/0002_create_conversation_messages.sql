-- 0002: conversation_messages — the ordered message log of a conversation.
--
-- Every NLIP message received or sent in a conversation, in the order the store accepted it. The
-- message is kept as JSON because the store knows nothing about NLIP types; the codec crate owns them.
CREATE TABLE conversation_messages (
    -- The conversation this message belongs to; the log goes when its conversation goes.
    conversation_id TEXT    NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    -- Position in the log, starting at 1, assigned by the store from conversations.last_seq.
    seq             INTEGER NOT NULL CHECK (seq >= 1),
    -- 'inbound' = received from the peer, 'outbound' = sent by us. A log without direction cannot be
    -- replayed as a dialogue.
    direction       TEXT    NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    -- The NLIP message as JSON.
    message         TEXT    NOT NULL CHECK (json_valid(message)),
    -- When the store accepted it.
    created_at      TEXT    NOT NULL,
    -- The key doubles as the index that serves "messages of C in order" and makes a duplicate
    -- sequence number impossible even if the counter logic were wrong.
    PRIMARY KEY (conversation_id, seq)
) STRICT;
