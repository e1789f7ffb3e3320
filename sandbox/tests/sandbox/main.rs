//! The integration tests of `parley-sandbox`, in one test binary, each module with its own
//! sandboxes: publishing (`publish`), hostile guests (`hostile`), how results become JSON
//! (`json_output`), async calls and the reset thread (`async_calls`), and the mapping runtime
//! (`mapping`).

mod async_calls;
mod hostile;
mod json_output;
mod mapping;
mod publish;
