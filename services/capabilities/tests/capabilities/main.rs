//! The integration tests of `parley-capabilities`, in one test binary: loading capabilities
//! files and dataset lookups (`load`), the `http` binding against a real server (`http`), and
//! the `agent` binding's request and result (`agent`), and the `mcp` binding against real MCP
//! servers (`mcp`).

mod agent;
mod http;
mod load;
mod mcp;
