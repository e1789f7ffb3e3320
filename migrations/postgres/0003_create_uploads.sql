-- 0003: uploads — content-addressed blobs uploaded out of band.
--
-- A client uploads bytes once and refers to them from NLIP messages by id. The id is the SHA-256 of
-- the bytes, computed by the store (never taken from the caller), so identical uploads collapse into
-- one row and a reference can never point at bytes other than the ones it names.
CREATE TABLE uploads (
    -- Lower-case hex SHA-256 of `bytes`.
    id           TEXT        NOT NULL PRIMARY KEY CHECK (id ~ '^[0-9a-f]{64}$'),
    -- Byte length, kept beside the blob so metadata reads never de-TOAST the blob.
    size         BIGINT      NOT NULL CHECK (size >= 0 AND size = octet_length(bytes)),
    -- Media type declared by the first uploader; later identical uploads do not change it.
    content_type TEXT        NOT NULL CHECK (length(content_type) > 0),
    -- Original file name when the client sent one; informational only, never used as a path.
    filename     TEXT,
    -- The content itself.
    bytes        BYTEA       NOT NULL,
    -- When the content was first uploaded.
    created_at   TIMESTAMPTZ NOT NULL
);
