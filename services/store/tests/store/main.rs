//! The integration tests of `parley-store`, in one test binary: one story over every operation
//! on SQLite and PostgreSQL (`story`), resolving abbreviated protocol hashes (`prefix`), and
//! the spans the store emits (`spans`).

mod prefix;
mod spans;
mod story;
