//! The integration tests of `parley-store`, in one test binary: one story over every operation
//! on SQLite and PostgreSQL (`story`), log retention, the uploads' size and interrupted
//! negotiations (`bounded`), resolving abbreviated protocol hashes (`prefix`), model
//! calls and tokens per owner (`model_usage`), turns and idle expiry of conversations
//! (`expiry`), declared peers and their keys (`peers`), the connect timeout
//! (`connect_timeout`), and the spans the store emits (`spans`).
//! (`expiry`), the connect timeout (`connect_timeout`), and the
//! spans the store emits (`spans`), and the audit log (`audit`).

mod audit;
mod bounded;
mod connect_timeout;
mod expiry;
mod model_usage;
mod peers;
mod prefix;
mod spans;
mod story;
