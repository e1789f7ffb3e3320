//! Background work that runs on a period: the sweeps of idle conversations and of negotiations
//! a stopped process interrupted; and the last writes at shutdown, retried for a while.

use std::future::Future;
use std::time::Duration;

/// Runs `tick` at once, then every `period` until the task is aborted. A tick that overruns
/// its period delays the next one rather than bunching the missed ones together.
pub(crate) fn spawn_every<F, Fut>(period: Duration, mut tick: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut every = tokio::time::interval(period);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            tick().await;
        }
    })
}

/// How often [`retry_within`] tries again.
const RETRY_EVERY: Duration = Duration::from_millis(100);

/// Runs `step` until it returns 0 (nothing left to do) or `within` has passed, every
/// [`RETRY_EVERY`]; returns what the last step left. One step at least, also when `within` is
/// zero: what the last flush at shutdown does while the database cannot take it.
pub(crate) async fn retry_within<F, Fut>(within: Duration, mut step: F) -> usize
where
    F: FnMut() -> Fut,
    Fut: Future<Output = usize>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = step().await;
        let now = tokio::time::Instant::now();
        if left == 0 || now >= deadline {
            return left;
        }
        tokio::time::sleep(RETRY_EVERY.min(deadline - now)).await;
    }
}
