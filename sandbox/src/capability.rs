//! What a handler may reach: capabilities, performed by the embedder's [`CapabilityHost`] for
//! the names a call's [`Grants`] allow.

use std::collections::BTreeSet;
use std::sync::Arc;

/// What a capability call produces: the capability's result, or a message for the handler.
pub type CapabilityFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<serde_json::Value, String>> + Send>>;

/// Performs capabilities for handlers, only for capabilities the call's [`Grants`] allow and with
/// arguments within the size cap. The returned future is awaited on the call's own task (inside the
/// guest's fiber), so it may do async IO; it must not block the thread. The call's deadline keeps
/// running meanwhile: on a tokio runtime the future gets what is left of it and is dropped (the
/// capability cancelled, the call failing with `timeout`) when that runs out. A blocking caller
/// (`call_blocking`, `run_once`) has no timer to race it against, so there the deadline is only
/// checked when the capability returns. Dropping the call's future cancels the capability too.
pub trait CapabilityHost: Send + Sync {
    /// Runs `capability` with `args`. An `Err` becomes a catchable `CapabilityError` in the handler.
    fn call(&self, capability: &str, args: serde_json::Value) -> CapabilityFuture;
}

/// A synchronous function is a host whose answers are ready at once (fixtures, tests).
impl<F> CapabilityHost for F
where
    F: Fn(&str, serde_json::Value) -> Result<serde_json::Value, String> + Send + Sync,
{
    fn call(&self, capability: &str, args: serde_json::Value) -> CapabilityFuture {
        Box::pin(std::future::ready(self(capability, args)))
    }
}

/// A host with no capabilities: every call fails. For handlers granted nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCapabilities;

impl CapabilityHost for NoCapabilities {
    fn call(&self, capability: &str, _: serde_json::Value) -> CapabilityFuture {
        Box::pin(std::future::ready(Err(format!(
            "no capability host is configured for `{capability}`"
        ))))
    }
}

/// The capabilities one call may use, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants(Arc<BTreeSet<String>>);

impl Grants {
    /// Grants nothing.
    pub fn none() -> Self {
        Grants::default()
    }

    /// Whether `capability` is granted.
    pub fn allows(&self, capability: &str) -> bool {
        self.0.contains(capability)
    }

    /// The granted names, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

impl<S: Into<String>> FromIterator<S> for Grants {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Self {
        Grants(Arc::new(names.into_iter().map(Into::into).collect()))
    }
}
