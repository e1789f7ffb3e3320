-- 0013: write_probe — one row, rewritten by every readiness check.
--
-- Readiness means the database takes writes: a full disk or a database that went read-only answer
-- reads and fail writes. The check rewrites this one row in a write transaction, so it fails
-- exactly when the server's own writes would.
CREATE TABLE write_probe (
    id         SMALLINT    NOT NULL PRIMARY KEY CHECK (id = 1),
    -- When the last check wrote it.
    checked_at TIMESTAMPTZ NOT NULL
);
