-- 0005: protocol_agreements — which peer agreed which protocol with us, and in which role.
--
-- `role` is *our* role in the agreement: 'requester' rows answer "which protocols did I agree with
-- peer X" (so a requester can go straight to 0-RTT), 'provider' rows answer "who uses hash H".
CREATE TABLE protocol_agreements (
    -- The peer's identity as the caller knows it (agent id, or its base URL when it has no other).
    peer           TEXT NOT NULL CHECK (length(peer) > 0),
    -- The agreed protocol; it must be stored before anyone can agree on it.
    protocol_hash  TEXT NOT NULL REFERENCES protocols (hash),
    -- Our role: 'requester' (we asked) or 'provider' (we serve it).
    role           TEXT NOT NULL CHECK (role IN ('requester', 'provider')),
    -- Where to reach the peer (its base URL) when known; refreshed on every new agreement because
    -- peers move.
    peer_url       TEXT,
    -- First agreement.
    agreed_at      TEXT NOT NULL,
    -- Most recent (re-)agreement; a renegotiation that lands on the same text renews, never duplicates.
    last_agreed_at TEXT NOT NULL,
    -- The key serves "agreements with peer X" (leading column).
    PRIMARY KEY (peer, protocol_hash, role)
) STRICT;

-- Serves "who uses hash H".
CREATE INDEX protocol_agreements_by_protocol ON protocol_agreements (protocol_hash);
