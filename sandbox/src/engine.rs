//! The wasmtime engine and the epoch ticker.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
};

use crate::config::SandboxConfig;
use crate::error::SandboxError;
use crate::fast::{perf_map, reset::RESET_INSTANCES};

/// One epoch tick. Deadlines are rounded up to whole ticks, plus one.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(1);

/// Stack a call's fiber has beyond the wasm stack itself: wasmtime's own frames, the host
/// functions, and the future of a `CapabilityHost`, which is polled on the same fiber.
const FIBER_HOST_STACK: usize = 1024 * 1024;

/// Instance slots for publishes, beside the `pool_instances` for calls: a publish runs the runtime
/// in the same pool (see `publish::PublishSlots`).
pub(crate) const PUBLISH_INSTANCES: u32 = 2;

/// How long the epoch ticker keeps ticking after the last store is gone before it parks. Under
/// steady traffic stores come and go all the time; parking after each one would cost a thread
/// wake-up per call.
const TICKER_LINGER: Duration = Duration::from_millis(50);

/// The engine that serves calls and publishes: pooling allocator with copy-on-write memory images
/// and pooled fiber stacks (the guest runs with `call_async`), epoch deadlines, optionally fuel.
///
/// A call (or publish) is two core instances in one store: the handler's memory image, which
/// defines the memory, and the runtime code, which imports it and defines the table. So the pool
/// has two instances, one memory, one table and one fiber stack per call, for `pool_instances`
/// calls plus [`PUBLISH_INSTANCES`] publishes and, with deferred resets, [`RESET_INSTANCES`].
pub(crate) fn call_engine(config: &SandboxConfig) -> Result<Engine, SandboxError> {
    let wasm_stack = usize::try_from(config.wasm_stack_bytes).unwrap_or(usize::MAX);
    let reset_instances = if config.deferred_reset {
        RESET_INSTANCES
    } else {
        0
    };
    let stores = config
        .pool_instances
        .saturating_add(PUBLISH_INSTANCES)
        .saturating_add(reset_instances);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_core_instances(stores.saturating_mul(2))
        .total_stacks(stores)
        .total_memories(stores)
        .total_tables(stores)
        .max_memories_per_module(1)
        .max_tables_per_module(1)
        .max_memory_size(usize::try_from(config.memory_bytes).unwrap_or(usize::MAX))
        // See `SandboxConfig::pool_keep_resident_bytes`: memset instead of madvise on slot reuse.
        .linear_memory_keep_resident(
            usize::try_from(config.pool_keep_resident_bytes).unwrap_or(usize::MAX),
        )
        .table_keep_resident(64 * 1024)
        // With PAGEMAP_SCAN (Linux 6.7+) only the pages a call actually dirtied are reset by memcpy;
        // without it the first `keep_resident` bytes are reset wholesale, which for a 2 MiB
        // stack-first guest is mostly untouched stack. Off by default in wasmtime; `Auto` falls back
        // where the kernel lacks the ioctl.
        .pagemap_scan(Enabled::Auto);

    let mut wasm = Config::new();
    wasm.epoch_interruption(true)
        .consume_fuel(config.fuel.is_some())
        .max_wasm_stack(wasm_stack)
        .async_stack_size(wasm_stack.saturating_add(FIBER_HOST_STACK))
        .cranelift_opt_level(OptLevel::Speed)
        .parallel_compilation(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    perf_map::configure(config, &mut wasm);
    Engine::new(&wasm).map_err(|e| SandboxError::wasmtime("creating the wasmtime engine", e))
}

/// A stable digest of everything about `engine` that makes a compiled artifact (in)compatible.
pub(crate) fn compatibility_digest(engine: &Engine) -> u64 {
    // `DefaultHasher::new()` is SipHash with fixed keys: stable across runs of the same build, which is
    // all a cache key needs (a toolchain upgrade at worst causes one recompilation).
    let mut hasher = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.finish()
}

/// Increments the engine's epoch every [`EPOCH_TICK`] while any store is alive, until dropped.
/// [`TICKER_LINGER`] after the last call or publish the thread parks, so an idle server does not
/// wake up a thousand times a second; [`Ticker::hold`] wakes it before a store's deadline is set.
#[derive(Debug)]
pub(crate) struct Ticker {
    shared: Arc<TickerShared>,
    /// The ticking thread, unparked by `hold` and on drop.
    thread: thread::Thread,
}

#[derive(Debug)]
struct TickerShared {
    stop: AtomicBool,
    /// Stores alive that need the epoch to advance.
    active: std::sync::atomic::AtomicUsize,
    /// Ticks made so far (for tests and debugging).
    ticks: std::sync::atomic::AtomicU64,
}

/// Keeps the epoch advancing while alive; every `Store` owns one.
#[derive(Debug)]
pub(crate) struct EpochHold(Arc<TickerShared>);

impl Drop for EpochHold {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Ticker {
    pub(crate) fn start(engine: Engine) -> Result<Self, SandboxError> {
        let shared = Arc::new(TickerShared {
            stop: AtomicBool::new(false),
            active: std::sync::atomic::AtomicUsize::new(0),
            ticks: std::sync::atomic::AtomicU64::new(0),
        });
        let state = Arc::clone(&shared);
        let handle = thread::Builder::new()
            .name("sandbox-epoch".to_string())
            .spawn(move || {
                // Until when to keep ticking with no store alive; `None` when not lingering.
                let mut linger_until: Option<std::time::Instant> = None;
                while !state.stop.load(Ordering::Relaxed) {
                    if state.active.load(Ordering::Acquire) > 0 {
                        linger_until = Some(std::time::Instant::now() + TICKER_LINGER);
                    } else if linger_until.is_none_or(|t| std::time::Instant::now() >= t) {
                        // `hold` unparks after raising `active`; park's token makes a wake-up
                        // between the check and the park return at once. The timeout only
                        // bounds how long a dropped sandbox's thread lingers.
                        thread::park_timeout(Duration::from_millis(100));
                        linger_until = None;
                        continue;
                    }
                    thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                    state.ticks.fetch_add(1, Ordering::Relaxed);
                }
            })
            .map_err(|e| SandboxError::internal_with("starting the epoch thread", e))?;
        Ok(Ticker {
            shared,
            thread: handle.thread().clone(),
        })
    }

    /// Makes sure the epoch advances until the returned hold is dropped.
    pub(crate) fn hold(&self) -> EpochHold {
        if self.shared.active.fetch_add(1, Ordering::AcqRel) == 0 {
            // A no-op (one atomic swap) while the thread is lingering rather than parked.
            self.thread.unpark();
        }
        EpochHold(Arc::clone(&self.shared))
    }

    #[cfg(test)]
    fn ticks(&self) -> u64 {
        self.shared.ticks.load(Ordering::Relaxed)
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        // Not joined: the last reference to the sandbox may be dropped on any thread.
        self.shared.stop.store(true, Ordering::Relaxed);
        self.thread.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits up to 5 s for `condition`, so a busy machine slows the test instead of failing it.
    fn eventually(condition: impl Fn() -> bool) -> bool {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < until {
            if condition() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    #[test]
    fn the_ticker_ticks_only_while_held() {
        let ticker = Ticker::start(Engine::default()).expect("ticker");
        let idle = ticker.ticks();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(ticker.ticks(), idle, "no ticks without a hold");

        let hold = ticker.hold();
        let second = ticker.hold();
        assert!(
            eventually(|| ticker.ticks() >= idle + 5),
            "ticks while held"
        );
        drop(hold);
        let one_left = ticker.ticks();
        assert!(
            eventually(|| ticker.ticks() >= one_left + 5),
            "still ticking while one hold is left"
        );
        drop(second);
        // It lingers for TICKER_LINGER, then parks.
        std::thread::sleep(TICKER_LINGER + Duration::from_millis(20));
        let stopped = ticker.ticks();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(ticker.ticks(), stopped, "parked again after the last hold");
    }
}
