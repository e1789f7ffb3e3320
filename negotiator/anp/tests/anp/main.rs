//! The integration tests of `parley-anp`, in one test binary: meta-protocol messages, protocol
//! documents and the bounds on the work they ask for (`bounded`), the session state machines and verification, with the fixtures they share in
//! `support`.

mod bounded;
mod documents;
mod messages;
mod protocol_doc;
mod session;
mod support;
mod verify;
