//! The integration tests of `parley`, in one test binary: the `parley` executable end to end
//! (`cli`), and the mapping runtime against the JavaScript generated from the same mappings
//! (`mapping_equivalence`).

mod cli;
mod mapping_equivalence;
