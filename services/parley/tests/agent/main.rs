//! The integration tests of `parley`, in one test binary: the `parley` executable end to end
//! (`cli`), `parley audit` over what a real server recorded (`audit_cli`), crash safety under SIGKILL (`crash_safety`), a bounded load over HTTP and
//! WebSocket with negotiations among it (`load`), what a new user meets first through it (`cli_new_user`), `parley send`'s exit status
//! (`send_exit`), the requester's commands (`requester_cli`), a call whose answer breaks the
//! protocol reported to the provider (`fix_cli`), what the model cost as it shows it
//! (`model_cost`), `parley serve` and `parley send` over TLS (`tls_cli`), and the mapping runtime
//! against the JavaScript generated from the same mappings (`mapping_equivalence`), `parley peers`
//! (`peers_cli`), clients presenting their bearer token (`bearer`); `support` holds what the
//! executable's tests share.

mod audit_cli;
mod bearer;
mod cli;
mod cli_new_user;
mod crash_safety;
mod fix_cli;
mod load;
mod mapping_equivalence;
mod model_cost;
mod peers_cli;
mod requester_cli;
mod send_exit;
mod support;
mod tls_cli;
