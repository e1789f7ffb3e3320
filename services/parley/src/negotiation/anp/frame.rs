//! The seed-002 frame, read and written by `parley-anp` (pure, so it is fuzzed without this
//! crate's runtime); the connection drivers here use it through this module.

pub use parley_anp::frame::{
    Frame, FrameError, ProtocolType, encode, encode_application, encode_json,
};
