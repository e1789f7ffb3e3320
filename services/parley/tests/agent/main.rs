//! The integration tests of `parley`, in one test binary: the `parley` executable end to end
//! (`cli`), `parley send`'s exit status (`send_exit`), the requester's commands through it
//! (`requester_cli`), what the model cost as it shows it (`model_cost`), and the mapping runtime
//! against the JavaScript generated from the same mappings (`mapping_equivalence`); `support`
//! holds what the executable's tests share.

mod cli;
mod mapping_equivalence;
mod model_cost;
mod requester_cli;
mod send_exit;
mod support;
