//! The integration tests of `parley`, in one test binary: the `parley` executable end to end
//! (`cli`), the requester's commands through it (`requester_cli`), and the mapping runtime
//! against the JavaScript generated from the same mappings (`mapping_equivalence`); `support`
//! holds what the first two share.

mod cli;
mod mapping_equivalence;
mod requester_cli;
mod support;
