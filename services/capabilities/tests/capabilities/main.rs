//! The integration tests of `parley-capabilities`, in one test binary: loading capabilities
//! files and dataset lookups (`load`), and the `http` binding against a real server (`http`).

mod http;
mod load;
