-- 0012: negotiation_model_usage — what a negotiation's reasoning cost.
--
-- One counter row per (negotiation, purpose): evaluating proposals, generating and fixing the
-- handler, reviewing test cases, answering natural-language negotiation messages. Together they are
-- what the agreement a negotiation produced cost in model calls and tokens. Same columns and rules
-- as conversation_model_usage (0011).
CREATE TABLE negotiation_model_usage (
    -- The negotiation's id as stored in negotiations (hyphenated UUID text).
    negotiation_id    TEXT    NOT NULL REFERENCES negotiations (id) ON DELETE CASCADE,
    purpose           TEXT    NOT NULL CHECK (length(purpose) > 0),
    calls             INTEGER NOT NULL DEFAULT 0 CHECK (calls >= 0),
    unmetered_calls   INTEGER NOT NULL DEFAULT 0 CHECK (unmetered_calls >= 0),
    prompt_tokens     INTEGER NOT NULL DEFAULT 0 CHECK (prompt_tokens >= 0),
    completion_tokens INTEGER NOT NULL DEFAULT 0 CHECK (completion_tokens >= 0),
    PRIMARY KEY (negotiation_id, purpose),
    CHECK (unmetered_calls <= calls)
) STRICT;
