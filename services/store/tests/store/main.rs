//! The integration tests of `parley-store`, in one test binary: one story over every operation
//! on SQLite and PostgreSQL (`story`), and the spans the store emits (`spans`).

mod spans;
mod story;
