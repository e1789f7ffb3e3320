//! The integration tests of `parley-anp`, in one test binary: meta-protocol messages, protocol
//! documents, the session state machines and verification, with the fixtures they share in
//! `support`.

mod documents;
mod messages;
mod protocol_doc;
mod session;
mod support;
mod verify;
