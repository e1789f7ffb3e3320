//! The integration tests of `parley-reasoner`, in one test binary: the built-in protocol
//! reasoner (`builtin_protocol`, `builtin_props`, and on the corpus of documents other agents write, `corpus`), the OpenAI-compatible and hybrid ones
//! (`openai_protocol`), the natural-language backends (`dialogue`), the built-in one reading
//! simple requests (`understanding`), their spans (`spans`), what their model calls cost
//! (`usage`), how peer text reaches a model (`prompt_hygiene`), questions for the peer and their answers
//! (`questions`), with the fixtures they share in `support`. Data files live beside this directory, in
//! `tests/data` and `tests/golden`.

mod builtin_props;
mod builtin_protocol;
mod corpus;
mod dialogue;
mod openai_protocol;
mod prompt_hygiene;
mod questions;
mod spans;
mod support;
mod understanding;
mod usage;
