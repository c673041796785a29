//! Retrying what is safe to retry: capped exponential backoff with jitter,
//! given up after a time without success.

use std::time::{Duration, Instant};

use crate::error::Error;

/// How long and how often to retry transient failures ([`Error::is_transient`]).
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// The first pause; doubled after each failure up to `max_delay`.
    pub first_delay: Duration,
    pub max_delay: Duration,
    /// Give up when failures have lasted this long without a success.
    pub give_up_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
            give_up_after: Duration::from_secs(60),
        }
    }
}

/// A run of failures: when the next try may go, and whether to stop.
#[derive(Debug)]
pub struct Backoff {
    policy: RetryPolicy,
    since: Option<Instant>,
    attempt: u32,
}

impl Backoff {
    pub fn new(policy: RetryPolicy) -> Self {
        Self { policy, since: None, attempt: 0 }
    }

    /// A success ends the run of failures.
    pub fn reset(&mut self) {
        self.since = None;
        self.attempt = 0;
    }

    /// After a failure: the pause before the next try, or `None` to give up
    /// (the error is not transient, or failures have lasted too long).
    pub fn next_delay(&mut self, error: &Error) -> Option<Duration> {
        if !error.is_transient() {
            return None;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() >= self.policy.give_up_after {
            return None;
        }
        let exp = self.policy.first_delay.saturating_mul(1 << self.attempt.min(16));
        self.attempt += 1;
        let cap = exp.min(self.policy.max_delay);
        // Jitter in [cap/2, cap]: many clients of one restarted server spread out.
        let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        let jitter = rand::random::<u64>() % (nanos / 2 + 1);
        Some(Duration::from_nanos(nanos / 2 + jitter))
    }
}

/// Runs `op` until it succeeds, fails for good, or the policy gives up;
/// `on_retry` hears each transient failure and the pause after it.
pub async fn retry<T, F, Fut>(
    policy: RetryPolicy,
    mut on_retry: impl FnMut(&Error, Duration),
    mut op: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut backoff = Backoff::new(policy);
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) => match backoff.next_delay(&e) {
                Some(d) => {
                    on_retry(&e, d);
                    tokio::time::sleep(d).await;
                }
                None => return Err(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn transport() -> Error {
        Error::Transport { method: Method::GET, url: "u".into(), message: "refused".into() }
    }

    #[test]
    fn delays_grow_to_the_cap_and_refusals_are_not_retried() {
        let policy = RetryPolicy {
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(400),
            give_up_after: Duration::from_secs(60),
        };
        let mut b = Backoff::new(policy);
        let delays: Vec<Duration> = (0..5).map(|_| b.next_delay(&transport()).expect("retries")).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(400)));
        assert!(delays[4] >= Duration::from_millis(200), "capped at 400 ms, jitter down to half: {delays:?}");
        let refused = Error::Invalid("bad".into());
        assert!(b.next_delay(&refused).is_none());
    }

    #[test]
    fn failures_that_last_too_long_give_up() {
        let policy = RetryPolicy {
            first_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(1),
            give_up_after: Duration::ZERO,
        };
        assert!(Backoff::new(policy).next_delay(&transport()).is_none());
    }
}
