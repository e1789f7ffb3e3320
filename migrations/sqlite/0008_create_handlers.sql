-- 0008: handlers — generated handler code for an agreed protocol.
--
-- Life cycle: candidate -> (verification) -> active -> retired, or candidate -> failed. Only a handler
-- whose verification passed may become active, and at most one handler per protocol is active: the
-- partial unique index below makes a second active row impossible, whatever the code does.
CREATE TABLE handlers (
    -- Minted by the store (UUID v4, hyphenated text).
    id                  TEXT    NOT NULL PRIMARY KEY CHECK (length(id) = 36),
    -- The protocol this handler serves.
    protocol_hash       TEXT    NOT NULL REFERENCES protocols (hash),
    -- The generated source (JavaScript run in the sandbox).
    source              TEXT    NOT NULL,
    -- SHA-256 of `source`, computed by the store: the sandbox's compile-cache key, and proof of
    -- exactly which code was verified.
    source_sha256       TEXT    NOT NULL
                                CHECK (length(source_sha256) = 64 AND source_sha256 NOT GLOB '*[^0-9a-f]*'),
    -- Which reasoner backend generated it ('builtin', 'openai', ...): for audits and comparisons.
    backend             TEXT    NOT NULL CHECK (length(backend) > 0),
    -- JSON array of capability names the handler may call; the sandbox grants nothing else.
    capabilities        TEXT    NOT NULL
                                CHECK (json_valid(capabilities) AND json_type(capabilities) = 'array'),
    -- Outcome of running the negotiated test cases: the verifier's JSON report (NULL = not yet run).
    verification        TEXT    CHECK (verification IS NULL OR json_valid(verification)),
    -- Whether verification passed (NULL = not yet run); gates activation.
    verification_passed INTEGER CHECK (verification_passed IN (0, 1)),
    verified_at         TEXT,
    state               TEXT    NOT NULL DEFAULT 'candidate'
                                CHECK (state IN ('candidate', 'active', 'failed', 'retired')),
    created_at          TEXT    NOT NULL,
    -- Last activation (a retired handler may be re-activated to roll back).
    activated_at        TEXT,
    -- When it was last replaced by another active handler.
    retired_at          TEXT,
    CHECK (state NOT IN ('active', 'retired') OR verification_passed = 1),
    CHECK (state <> 'active' OR activated_at IS NOT NULL)
) STRICT;

-- The one-active-handler rule.
CREATE UNIQUE INDEX handlers_one_active_per_protocol ON handlers (protocol_hash) WHERE state = 'active';
-- All handlers of a protocol (history, retiring the active one).
CREATE INDEX handlers_by_protocol ON handlers (protocol_hash);
