//! The injected clock ([`ds_clock::Clock`]) in the runner's units: epoch
//! milliseconds as the `u64` of progress records and alarms.

use ds_clock::Clock;
use futures::future::BoxFuture;

/// The clock's reading; a clock before 1970 reads as 0.
pub(crate) fn epoch_ms(clock: &Clock) -> u64 {
    u64::try_from(clock.now_ms()).unwrap_or(0)
}

/// Resolves once the clock reads at least `deadline_ms`.
pub(crate) fn sleep_until(clock: &Clock, deadline_ms: u64) -> BoxFuture<'static, ()> {
    clock.sleep_until(i64::try_from(deadline_ms).unwrap_or(i64::MAX))
}
