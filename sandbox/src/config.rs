//! Every limit the sandbox enforces, as one plain struct that Parley's configuration deserialises.

use std::path::PathBuf;

use serde::Deserialize;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// Limits and resources of a [`Sandbox`](crate::Sandbox). Every field has a default (see
/// [`SandboxConfig::default`]); missing fields in a config file take it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// Deadline of one call, in milliseconds, enforced with wasmtime's epoch interruption
    /// (resolution: one epoch tick, 1 ms). It counts the time the guest runs and the time its
    /// capabilities take, not the time the call waits for the executor after yielding at a tick.
    pub deadline_ms: u64,
    /// Deadline for evaluating a handler's top-level code when it is published, in milliseconds.
    pub publish_deadline_ms: u64,
    /// Optional fuel (roughly: wasm instructions) per call. Deterministic, but costs some speed on every
    /// call, so it is off unless set. Changing it changes the engine and so the artifact cache key.
    pub fuel: Option<u64>,
    /// Linear-memory cap of one instance, in bytes. Growing past it traps (`out_of_memory`).
    pub memory_bytes: u64,
    /// Native stack available to wasm code, in bytes. Exhausting it traps (`stack_overflow`).
    pub wasm_stack_bytes: u64,
    /// Largest handler source accepted by `publish`, in bytes.
    pub source_bytes: u64,
    /// Largest serialised input JSON, in bytes.
    pub input_bytes: u64,
    /// Largest serialised output JSON, in bytes.
    pub output_bytes: u64,
    /// Captured log bytes per call (console.* and stdout/stderr); the rest is dropped and the output is
    /// marked truncated.
    pub log_bytes: u64,
    /// Largest serialised arguments of one `host.call`, in bytes.
    pub host_call_args_bytes: u64,
    /// Largest serialised result of one `host.call`, in bytes; a bigger result is a capability failure.
    pub host_call_result_bytes: u64,
    /// Most `host.call`s one call may make.
    pub max_host_calls: u32,
    /// Instance slots in wasmtime's pooling allocator: the most calls running at once (each holds two
    /// core instances, the handler's memory image and the runtime code; publishes have two slots of
    /// their own on top, the reset thread one). An async call waits for a free slot up to
    /// `deadline_ms`, then fails with `overloaded`; a blocking call fails at once.
    pub pool_instances: u32,
    /// Whether a finished call's instance is reset after the call has answered, on the sandbox's
    /// own thread in the idle scheduling class (`true`), or before the call returns (`false`, which
    /// also starts no thread and makes no instance ready ahead). See `fast/reset.rs` for what it
    /// buys.
    pub deferred_reset: bool,
    /// Instances kept instantiated ahead for the handlers called last, each holding one of the
    /// `pool_instances` slots until a call of its handler takes it (or a call that finds no free
    /// slot takes the slot of the oldest). A call that finds one skips instantiation; the
    /// instantiation is done after the previous call has answered, by the reset thread (so none
    /// with `deferred_reset = false`). `0` instantiates every call on its way, as the first call of
    /// a handler always does. More than `pool_instances` means `pool_instances`. See
    /// `fast/ready.rs` for what it buys.
    pub ready_instances: u32,
    /// Bytes of each pooled linear memory reset with `memset` rather than `madvise` when a slot is
    /// reused. Keeping pages resident avoids page faults and the kernel's mmap lock on every call, which
    /// is what lets two threads scale; the cost is that much resident memory per warm slot.
    pub pool_keep_resident_bytes: u64,
    /// Directory of the compiled-artifact cache, which holds the runtime's compiled code (handlers
    /// are memory images built in milliseconds and are not cached); `None` compiles the runtime once
    /// per `Sandbox`, in memory only.
    pub cache_dir: Option<PathBuf>,
    /// Whether the server compiles the runtime's code (or loads it from the artifact cache) in the
    /// background at start, so that the first negotiation does not pay for that.
    pub warm_up: bool,
    /// Whether wasmtime writes `/tmp/perf-<pid>.map`, which names the runtime's and the handlers'
    /// compiled functions for Linux `perf` (`perf record -p <pid>`, then `perf report`). For
    /// profiling handlers; the file grows with every module compiled or loaded, so it is off
    /// unless set. See `fast/perf_map.rs`.
    pub perf_map: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            deadline_ms: 1_000,
            publish_deadline_ms: 5_000,
            fuel: None,
            memory_bytes: 64 * MIB,
            wasm_stack_bytes: MIB,
            source_bytes: MIB,
            input_bytes: MIB,
            output_bytes: MIB,
            log_bytes: 64 * KIB,
            host_call_args_bytes: 256 * KIB,
            host_call_result_bytes: MIB,
            max_host_calls: 64,
            pool_instances: 64,
            deferred_reset: true,
            ready_instances: 8,
            pool_keep_resident_bytes: 4 * MIB,
            cache_dir: None,
            warm_up: true,
            perf_map: false,
        }
    }
}

/// A [`SandboxConfig`] field outside its allowed range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sandbox config: `{field}` {problem}")]
pub struct ConfigError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

fn check(field: &'static str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if value < min || value > max {
        return Err(ConfigError {
            field,
            problem: format!("is {value}, must be between {min} and {max}"),
        });
    }
    Ok(())
}

impl SandboxConfig {
    /// Checks every limit against a sane range. `Sandbox::new` calls it; the composition root may call
    /// it earlier to fail before opening sockets.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check("deadline_ms", self.deadline_ms, 1, 10 * 60 * 1000)?;
        check(
            "publish_deadline_ms",
            self.publish_deadline_ms,
            1,
            10 * 60 * 1000,
        )?;
        if let Some(fuel) = self.fuel {
            check("fuel", fuel, 1, u64::MAX)?;
        }
        // The runtime's memory image alone needs a few MiB; 4 GiB is wasm32's address space.
        check("memory_bytes", self.memory_bytes, 8 * MIB, 4 * 1024 * MIB)?;
        // Every pooled fiber stack is this plus 1 MiB for host code, reserved once per pool slot.
        check("wasm_stack_bytes", self.wasm_stack_bytes, 64 * KIB, 2 * MIB)?;
        check("source_bytes", self.source_bytes, 1, 64 * MIB)?;
        // Sizes are handed to the guest as i32 lengths.
        let i32_max = i32::MAX as u64;
        check(
            "input_bytes",
            self.input_bytes,
            1,
            i32_max.min(self.memory_bytes),
        )?;
        check(
            "output_bytes",
            self.output_bytes,
            1,
            i32_max.min(self.memory_bytes),
        )?;
        check("log_bytes", self.log_bytes, 0, 64 * MIB)?;
        check(
            "host_call_args_bytes",
            self.host_call_args_bytes,
            1,
            i32_max,
        )?;
        check(
            "host_call_result_bytes",
            self.host_call_result_bytes,
            1,
            i32_max,
        )?;
        check("pool_instances", u64::from(self.pool_instances), 1, 10_000)?;
        check(
            "ready_instances",
            u64::from(self.ready_instances),
            0,
            10_000,
        )?;
        check(
            "pool_keep_resident_bytes",
            self.pool_keep_resident_bytes,
            0,
            self.memory_bytes,
        )?;
        if let Some(dir) = &self.cache_dir
            && dir.as_os_str().is_empty()
        {
            return Err(ConfigError {
                field: "cache_dir",
                problem: "is empty; leave it out to disable the on-disk cache".to_string(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        SandboxConfig::default()
            .validate()
            .expect("defaults must validate");
    }

    #[test]
    fn out_of_range_fields_are_named() {
        let config = SandboxConfig {
            memory_bytes: 1024,
            ..SandboxConfig::default()
        };
        let error = config
            .validate()
            .expect_err("1 KiB of memory is too little");
        assert_eq!(error.field, "memory_bytes");

        let config = SandboxConfig {
            deadline_ms: 0,
            ..SandboxConfig::default()
        };
        assert_eq!(
            config.validate().expect_err("zero deadline").field,
            "deadline_ms"
        );
    }

    #[test]
    fn deserialises_partial_config_with_defaults() {
        let config: SandboxConfig =
            serde_json::from_str(r#"{"deadline_ms": 50, "fuel": 1000000, "cache_dir": "/tmp/x"}"#)
                .expect("valid config json");
        assert_eq!(config.deadline_ms, 50);
        assert_eq!(config.fuel, Some(1_000_000));
        assert_eq!(config.memory_bytes, SandboxConfig::default().memory_bytes);
        assert!(serde_json::from_str::<SandboxConfig>(r#"{"deadline": 5}"#).is_err());
    }
}
