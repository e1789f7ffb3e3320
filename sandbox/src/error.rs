//! The one error type of this crate: one variant per outcome a caller acts on.

use crate::config::ConfigError;

/// Why publishing or calling a handler failed. Every variant has a stable [`code`](Self::code).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The configuration is out of range.
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    /// The handler source was rejected at publish time: too large, not UTF-8, a syntax error, top-level
    /// code that threw or ran too long, or no `handle` function.
    #[error("invalid handler: {message}")]
    InvalidHandler {
        /// What was wrong, including the JavaScript exception if there was one.
        message: String,
    },
    /// Compiling the runtime's code or a handler's memory image failed.
    #[error("compiling the handler failed")]
    Compile {
        /// The compiler's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The handler threw (anything: an Error, a string, a number, ...).
    #[error("the handler threw: {message}")]
    HandlerThrew {
        /// `name: message` of an Error, or a description of the thrown value.
        message: String,
    },
    /// The call ran past its deadline.
    #[error("the handler ran past its {deadline_ms} ms deadline")]
    Timeout {
        /// The configured deadline.
        deadline_ms: u64,
    },
    /// The call used up its fuel.
    #[error("the handler used up its fuel ({fuel})")]
    FuelExhausted {
        /// The configured fuel.
        fuel: u64,
    },
    /// The handler tried to grow its memory past the cap.
    #[error("the handler ran out of memory (limit {limit_bytes} bytes)")]
    OutOfMemory {
        /// The configured memory cap.
        limit_bytes: u64,
    },
    /// The handler recursed too deep (JavaScript or wasm stack).
    #[error("the handler overflowed its stack: {message}")]
    StackOverflow {
        /// Where it was detected.
        message: String,
    },
    /// The serialised input exceeds the input cap.
    #[error("input of {size} bytes exceeds the {limit} byte limit")]
    InputTooLarge {
        /// Serialised input size.
        size: u64,
        /// The configured cap.
        limit: u64,
    },
    /// The serialised output exceeds the output cap.
    #[error("output of {size} bytes exceeds the {limit} byte limit")]
    OutputTooLarge {
        /// Serialised output size.
        size: u64,
        /// The configured cap.
        limit: u64,
    },
    /// The handler returned something that is not JSON (undefined, a function, a cyclic object, ...).
    #[error("the handler returned invalid output: {message}")]
    InvalidOutput {
        /// What was wrong.
        message: String,
    },
    /// The handler asked for a capability it was not granted, or made too many host calls. Not
    /// catchable by the handler: the call ends.
    #[error("capability `{capability}` refused: {reason}")]
    CapabilityRefused {
        /// The requested capability name (lossy UTF-8).
        capability: String,
        /// Why.
        reason: String,
    },
    /// The handler called a capability with arguments over the size cap. Not catchable.
    #[error("arguments of {size} bytes to capability `{capability}` exceed the {limit} byte limit")]
    CapabilityArgsTooLarge {
        /// The requested capability name.
        capability: String,
        /// Serialised argument size.
        size: u64,
        /// The configured cap.
        limit: u64,
    },
    /// A capability failed and the handler did not catch the resulting `CapabilityError`.
    #[error("{message}")]
    CapabilityFailed {
        /// `capability NAME failed: REASON`.
        message: String,
    },
    /// Every pooled instance slot is busy and none came free in time.
    #[error("the sandbox is overloaded: no free instance slot")]
    Overloaded,
    /// Something went wrong in the sandbox itself (a bug, a corrupt cache, an I/O error).
    #[error("sandbox internal error: {message}")]
    Internal {
        /// Context.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl SandboxError {
    /// A stable, machine-readable code for this error class.
    pub fn code(&self) -> &'static str {
        match self {
            SandboxError::InvalidConfig(_) => "invalid_config",
            SandboxError::InvalidHandler { .. } => "invalid_handler",
            SandboxError::Compile { .. } => "compile_failed",
            SandboxError::HandlerThrew { .. } => "handler_threw",
            SandboxError::Timeout { .. } => "timeout",
            SandboxError::FuelExhausted { .. } => "fuel_exhausted",
            SandboxError::OutOfMemory { .. } => "out_of_memory",
            SandboxError::StackOverflow { .. } => "stack_overflow",
            SandboxError::InputTooLarge { .. } => "input_too_large",
            SandboxError::OutputTooLarge { .. } => "output_too_large",
            SandboxError::InvalidOutput { .. } => "invalid_output",
            SandboxError::CapabilityRefused { .. } => "capability_refused",
            SandboxError::CapabilityArgsTooLarge { .. } => "capability_args_too_large",
            SandboxError::CapabilityFailed { .. } => "capability_failed",
            SandboxError::Overloaded => "overloaded",
            SandboxError::Internal { .. } => "internal",
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        SandboxError::Internal {
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn internal_with(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        SandboxError::Internal {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// Wraps a wasmtime error, keeping its whole chain as the source.
    pub(crate) fn wasmtime(message: impl Into<String>, error: wasmtime::Error) -> Self {
        SandboxError::internal_with(message, WasmtimeError(format!("{error:#}")))
    }
}

/// A wasmtime error flattened to text (its cause chain included), so the public error type does not
/// expose wasmtime's types.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct WasmtimeError(pub(crate) String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable() {
        assert_eq!(SandboxError::Timeout { deadline_ms: 1 }.code(), "timeout");
        assert_eq!(
            SandboxError::CapabilityRefused {
                capability: "x".into(),
                reason: "not granted".into()
            }
            .code(),
            "capability_refused"
        );
        assert_eq!(SandboxError::internal("x").code(), "internal");
    }
}
