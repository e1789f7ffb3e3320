//! One call: the handler's instance (ready or made now), the input in, the outcome out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Engine, Memory, Store, TypedFunc};

use crate::config::SandboxConfig;
use crate::error::SandboxError;
use crate::fast::reset::Release;
use crate::host::{CallLimits, CallState, Phase, kind};
use crate::runtime::Entry;
use crate::store::{classify, idle_store, start_clock};
use crate::{CallReport, CapabilityHost, Grants, Handler, HandlerInner, SandboxInner};

/// Serialises the input once, before any work, and enforces the input cap.
pub(crate) fn serialize_input(
    config: &SandboxConfig,
    input: &serde_json::Value,
) -> Result<Vec<u8>, SandboxError> {
    let bytes = serde_json::to_vec(input)
        .map_err(|e| SandboxError::internal_with("serialising the input", e))?;
    if bytes.len() as u64 > config.input_bytes {
        return Err(SandboxError::InputTooLarge {
            size: bytes.len() as u64,
            limit: config.input_bytes,
        });
    }
    Ok(bytes)
}

pub(crate) fn limits(config: &SandboxConfig, deadline_ms: u64) -> CallLimits {
    CallLimits {
        memory_bytes: config.memory_bytes,
        output_bytes: config.output_bytes,
        log_bytes: config.log_bytes,
        host_call_args_bytes: config.host_call_args_bytes,
        host_call_result_bytes: config.host_call_result_bytes,
        max_host_calls: config.max_host_calls,
        deadline: Duration::from_millis(deadline_ms),
    }
}

/// How deep JSON from a handler (its result, a capability's arguments) may nest: serde_json's
/// recursion limit, which keeps the host's stack safe while parsing.
pub(crate) const MAX_JSON_DEPTH: usize = 128;

/// Parses JSON text the guest wrote. The guest only writes well-formed JSON (its own writer or
/// `JSON.stringify`), so what fails here is a value nested deeper than [`MAX_JSON_DEPTH`]; the
/// error is a predicate for a sentence about that value ("the result is …").
pub(crate) fn guest_json(bytes: &[u8]) -> Result<serde_json::Value, String> {
    serde_json::from_slice(bytes).map_err(|e| {
        // serde_json has no public error code for it; its message is stable.
        if e.to_string().starts_with("recursion limit exceeded") {
            format!("nested deeper than {MAX_JSON_DEPTH} levels")
        } else {
            format!("not JSON ({e})")
        }
    })
}

/// Maps the guest's reported outcome to a result.
pub(crate) fn outcome(output: Option<(u32, Vec<u8>)>) -> Result<serde_json::Value, SandboxError> {
    let Some((kind, bytes)) = output else {
        return Err(SandboxError::internal("the guest reported no outcome"));
    };
    let text = || String::from_utf8_lossy(&bytes).into_owned();
    match kind {
        kind::OK => guest_json(&bytes).map_err(|problem| SandboxError::InvalidOutput {
            message: format!("the handler's result is {problem}"),
        }),
        kind::THREW => Err(SandboxError::HandlerThrew { message: text() }),
        kind::INVALID_OUTPUT => Err(SandboxError::InvalidOutput { message: text() }),
        kind::CAPABILITY_FAILED => Err(SandboxError::CapabilityFailed { message: text() }),
        kind::STACK_OVERFLOW => Err(SandboxError::StackOverflow { message: text() }),
        kind::INVALID_HANDLER => Err(SandboxError::InvalidHandler { message: text() }),
        kind::INTERNAL => Err(SandboxError::internal(format!("guest: {}", text()))),
        other => Err(SandboxError::internal(format!(
            "the guest reported an unknown outcome kind {other}"
        ))),
    }
}

/// A call's store with the handler's instances in it, before any of its code has run, and the
/// entry points the call uses. A store holds exactly one of these, and a call runs in exactly one.
pub(crate) struct Instantiated {
    store: Store<CallState>,
    run: TypedFunc<u32, ()>,
    memory: Memory,
}

impl Instantiated {
    /// Puts `handler`'s instances (its memory image, then the runtime code over it) into a new
    /// store holding `state`. The store's clock is not started.
    pub(crate) async fn new(
        handler: &HandlerInner,
        state: CallState,
    ) -> Result<Self, (Store<CallState>, wasmtime::Error)> {
        let mut store = idle_store(&handler.engine, state);
        let found = async {
            let instance = handler
                .runtime
                .instantiate(&mut store, &handler.image)
                .await?;
            let entry = &handler.runtime.entry;
            let run = Entry::func::<u32, ()>(&instance, &mut store, &entry.run)?;
            let memory = entry.memory(&instance, &mut store)?;
            wasmtime::Result::Ok((run, memory))
        }
        .await;
        match found {
            Ok((run, memory)) => Ok(Instantiated { store, run, memory }),
            Err(e) => Err((store, e)),
        }
    }
}

/// What one call is given: its serialised input, grants and capability host, and how it is
/// driven.
pub(crate) struct CallInput {
    pub(crate) input: Vec<u8>,
    pub(crate) grants: Grants,
    pub(crate) host: Arc<dyn CapabilityHost>,
    /// The call is driven by a blocking executor (`call_blocking`, `run_once`); see
    /// `CallState::blocking`.
    pub(crate) blocking: bool,
}

/// How many hex digits of a handler's hash name it in spans and logs.
const HASH_PREFIX: usize = 12;

/// Runs `handler` on `call`'s input in a fresh instance (`ready`, instantiated ahead for this
/// handler, or one made now), then gives the instance back as `release` says; the report keeps
/// the logs whatever the outcome. Its span, `sandbox.call`, names the handler by a prefix of its
/// hash and records the outcome (`ok` or the error's code); never the input or the answer.
#[tracing::instrument(
    name = "sandbox.call",
    level = "debug",
    skip_all,
    fields(
        handler = handler.hash().get(..HASH_PREFIX).unwrap_or(handler.hash()),
        outcome = tracing::field::Empty,
    )
)]
pub(crate) async fn call_report(
    sandbox: &SandboxInner,
    handler: &Handler,
    call: CallInput,
    ready: Option<Instantiated>,
    release: Release,
) -> CallReport {
    let started = Instant::now();
    let CallInput {
        input,
        grants,
        host,
        blocking,
    } = call;
    let report = match prepare(sandbox, handler, grants, host, blocking, ready).await {
        Ok(instantiated) => run(sandbox, handler, instantiated, input, release).await,
        Err(error) => CallReport::failed(error, started),
    };
    let outcome = match &report.result {
        Ok(_) => "ok",
        Err(error) => error.code(),
    };
    tracing::Span::current().record("outcome", outcome);
    if let Err(error) = &report.result {
        tracing::debug!(
            code = error.code(),
            logs = report.logs.len(),
            "sandbox.call failed"
        );
    }
    CallReport {
        elapsed: started.elapsed(),
        ..report
    }
}

/// The call's instance with its state in it and its clock started: `ready`, or one made now.
async fn prepare(
    sandbox: &SandboxInner,
    handler: &Handler,
    grants: Grants,
    host: Arc<dyn CapabilityHost>,
    blocking: bool,
    ready: Option<Instantiated>,
) -> Result<Instantiated, SandboxError> {
    let config = &sandbox.config;
    if !Engine::same(&handler.inner.engine, &sandbox.engine) {
        return Err(SandboxError::internal(
            "this handler was published by a different sandbox",
        ));
    }
    let mut state = CallState::new(
        Phase::Call,
        limits(config, config.deadline_ms),
        grants,
        host,
        sandbox.next_seed(),
    );
    state.blocking = blocking;
    let mut call = match ready {
        Some(mut ready) => {
            *ready.store.data_mut() = state;
            ready
        }
        None => match Instantiated::new(&handler.inner, state).await {
            Ok(instantiated) => instantiated,
            Err((_, e))
                if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                    .is_some() =>
            {
                return Err(SandboxError::Overloaded);
            }
            Err((mut store, e)) => {
                return Err(classify(&mut store, e, config, config.deadline_ms));
            }
        },
    };
    // Host functions find the guest's memory here rather than by its export's name.
    call.store.data_mut().memory = Some(call.memory);
    start_clock(
        &mut call.store,
        &sandbox.ticker,
        config.deadline_ms,
        config.fuel,
    )?;
    Ok(call)
}

/// Runs the prepared call on `input`, then gives the instance back as `release` says.
async fn run(
    sandbox: &SandboxInner,
    handler: &Handler,
    call: Instantiated,
    input: Vec<u8>,
    release: Release,
) -> CallReport {
    let config = &sandbox.config;
    let Instantiated { mut store, run, .. } = call;
    let ran = async {
        let len = store.data_mut().hand_input(input)?;
        run.call_async(&mut store, len).await
    }
    .await;
    let trapped = ran
        .err()
        .map(|error| classify(&mut store, error, config, config.deadline_ms));
    let state = store.data_mut();
    let result = match trapped {
        Some(error) => Err(error),
        None => outcome(state.output.take()),
    };
    let logs = std::mem::take(&mut state.logs);
    let logs_truncated = state.logs_truncated;
    release.instance(store, &handler.inner);
    CallReport {
        result,
        logs,
        logs_truncated,
        elapsed: Duration::ZERO,
    }
}
