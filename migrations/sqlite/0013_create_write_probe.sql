-- 0013: write_probe — one row, rewritten by every readiness check.
--
-- Readiness means the database takes writes: a full disk, a read-only file or directory, or a file
-- deleted under the server answer reads and fail writes. The check rewrites this one row in a write
-- transaction, so it fails exactly when the server's own writes would.
CREATE TABLE write_probe (
    id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    -- When the last check wrote it (RFC 3339 UTC text, as everywhere).
    checked_at TEXT    NOT NULL
) STRICT;
