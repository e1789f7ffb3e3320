-- 0016: audit_events — who did what, when, and how it went.
--
-- One row per decision or call the server made on a peer's behalf: a negotiation started or
-- ended, a handler activated, a capability called, an authentication that failed, an action
-- refused. Rows are only ever appended; they hang on nothing (no foreign key), so deleting an
-- idle conversation, or anything else, leaves the record of what happened in it.
CREATE TABLE audit_events (
    -- Assigned in insertion order; breaks ties between events of the same instant.
    id      INTEGER NOT NULL PRIMARY KEY,
    -- When it happened (RFC 3339 UTC text: text order is time order).
    at      TEXT    NOT NULL,
    -- The authenticated peer's id; NULL while the peer is known by its address only.
    peer    TEXT    CHECK (peer IS NULL OR length(peer) > 0),
    -- The peer's network address (an IP address); NULL for work no peer caused.
    address TEXT    CHECK (address IS NULL OR length(address) > 0),
    -- What was done or attempted: 'negotiation.start', 'capability.call', 'authenticate', ...
    action  TEXT    NOT NULL CHECK (length(action) > 0),
    -- What it was done to: a negotiation id, a protocol hash, a capability name, a scheme.
    subject TEXT    NOT NULL CHECK (length(subject) > 0),
    -- How it went: 'ok', 'refused', 'failed', a negotiation's status or an error code.
    outcome TEXT    NOT NULL CHECK (length(outcome) > 0),
    -- Whatever else explains it (a reason, a duration, the protocol agreed), as JSON.
    detail  TEXT    CHECK (detail IS NULL OR json_valid(detail))
) STRICT;

-- `parley audit` lists newest first, optionally by peer, address, action or outcome, within a
-- time range: one index per filter, each ordered by time.
CREATE INDEX audit_events_by_time ON audit_events (at);
CREATE INDEX audit_events_by_peer ON audit_events (peer, at) WHERE peer IS NOT NULL;
CREATE INDEX audit_events_by_address ON audit_events (address, at) WHERE address IS NOT NULL;
CREATE INDEX audit_events_by_action ON audit_events (action, at);
CREATE INDEX audit_events_by_outcome ON audit_events (outcome, at);
