-- 0011: conversation_model_usage — what a conversation's natural-language answers cost.
--
-- One counter row per (conversation, purpose), added to after every answer that called a language
-- model. The purpose is the reasoner's name for why the model was called (`answer` for a
-- natural-language answer); the store keeps it as an opaque name. Tokens are what the model's
-- responses reported; a call whose response reported none (or that got no response) counts in
-- `calls` and `unmetered_calls` and adds no tokens, so the token columns are a lower bound whenever
-- `unmetered_calls` > 0.
CREATE TABLE conversation_model_usage (
    conversation_id   TEXT    NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    purpose           TEXT    NOT NULL CHECK (length(purpose) > 0),
    calls             INTEGER NOT NULL DEFAULT 0 CHECK (calls >= 0),
    unmetered_calls   INTEGER NOT NULL DEFAULT 0 CHECK (unmetered_calls >= 0),
    prompt_tokens     INTEGER NOT NULL DEFAULT 0 CHECK (prompt_tokens >= 0),
    completion_tokens INTEGER NOT NULL DEFAULT 0 CHECK (completion_tokens >= 0),
    PRIMARY KEY (conversation_id, purpose),
    CHECK (unmetered_calls <= calls)
) STRICT;
