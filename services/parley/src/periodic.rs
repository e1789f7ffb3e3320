//! Background work that runs on a period: the sweeps of idle conversations and of negotiations
//! a stopped process interrupted.

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
