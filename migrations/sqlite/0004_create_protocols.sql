-- 0004: protocols — application protocols agreed through ANP negotiation.
--
-- The hash is the protocol's identity on the wire: SHA-256 over the exact UTF-8 bytes of the agreed
-- text. It is what a requester sends for 0-RTT, so it is computed by the store from the text and the
-- text is kept byte for byte (TEXT, never normalised).
CREATE TABLE protocols (
    -- Lower-case hex SHA-256 of `text`.
    hash       TEXT NOT NULL PRIMARY KEY
                    CHECK (length(hash) = 64 AND hash NOT GLOB '*[^0-9a-f]*'),
    -- The agreed protocol document (markdown with JSON Schemas and test cases).
    text       TEXT NOT NULL,
    -- When this side first stored it.
    created_at TEXT NOT NULL
) STRICT;
