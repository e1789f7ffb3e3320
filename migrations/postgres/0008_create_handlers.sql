-- 0008: handlers — generated handler code for an agreed protocol.
--
-- Life cycle: candidate -> (verification) -> active -> retired, or candidate -> failed. Only a handler
-- whose verification passed may become active, and at most one handler per protocol is active: the
-- partial unique index below makes a second active row impossible, whatever the code does.
CREATE TABLE handlers (
    -- Minted by the store (UUID v4).
    id                  UUID        NOT NULL PRIMARY KEY,
    -- The protocol this handler serves.
    protocol_hash       TEXT        NOT NULL REFERENCES protocols (hash),
    -- The generated source (JavaScript run in the sandbox).
    source              TEXT        NOT NULL,
    -- SHA-256 of `source`, computed by the store: the sandbox's compile-cache key, and proof of
    -- exactly which code was verified.
    source_sha256       TEXT        NOT NULL CHECK (source_sha256 ~ '^[0-9a-f]{64}$'),
    -- Which reasoner backend generated it ('builtin', 'openai', ...): for audits and comparisons.
    backend             TEXT        NOT NULL CHECK (length(backend) > 0),
    -- JSON array of capability names the handler may call; the sandbox grants nothing else.
    capabilities        JSONB       NOT NULL CHECK (jsonb_typeof(capabilities) = 'array'),
    -- Outcome of running the negotiated test cases: the verifier's JSON report (NULL = not yet run).
    verification        JSONB,
    -- Whether verification passed (NULL = not yet run); gates activation.
    verification_passed BOOLEAN,
    verified_at         TIMESTAMPTZ,
    state               TEXT        NOT NULL DEFAULT 'candidate'
                                    CHECK (state IN ('candidate', 'active', 'failed', 'retired')),
    created_at          TIMESTAMPTZ NOT NULL,
    -- Last activation (a retired handler may be re-activated to roll back).
    activated_at        TIMESTAMPTZ,
    -- When it was last replaced by another active handler.
    retired_at          TIMESTAMPTZ,
    CHECK (state NOT IN ('active', 'retired') OR verification_passed IS TRUE),
    CHECK (state <> 'active' OR activated_at IS NOT NULL)
);

-- The one-active-handler rule.
CREATE UNIQUE INDEX handlers_one_active_per_protocol ON handlers (protocol_hash) WHERE state = 'active';
-- All handlers of a protocol (history, retiring the active one).
CREATE INDEX handlers_by_protocol ON handlers (protocol_hash);
