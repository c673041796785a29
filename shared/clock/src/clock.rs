//! The wall clock: epoch milliseconds and sleeping until one.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::oneshot;

/// Milliseconds since the Unix epoch, from one of three sources:
/// - [`Clock::system`], the operating system's wall clock, read on every
///   call (production: expiry and alarm times are compared across
///   processes, so they must not drift from the wall);
/// - [`Clock::tokio`], one wall-clock reading advanced by tokio's monotonic
///   clock, so it follows tokio's paused test time;
/// - [`Clock::manual`], which moves only when told ([`Clock::advance`],
///   [`Clock::set`]) and wakes its sleepers then.
#[derive(Clone)]
pub struct Clock {
    source: Arc<Source>,
}

enum Source {
    System,
    Tokio { base_instant: tokio::time::Instant, base_epoch_ms: i64 },
    Manual(Mutex<Manual>),
}

#[derive(Default)]
struct Manual {
    now: i64,
    sleepers: Vec<(i64, oneshot::Sender<()>)>,
}

fn system_epoch_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

impl Clock {
    /// The operating system's wall clock.
    pub fn system() -> Self {
        Self { source: Arc::new(Source::System) }
    }

    /// The wall clock as read now, advanced from here on by tokio's
    /// monotonic clock (and so by `tokio::time::advance` in paused tests).
    pub fn tokio() -> Self {
        let source = Source::Tokio { base_instant: tokio::time::Instant::now(), base_epoch_ms: system_epoch_ms() };
        Self { source: Arc::new(source) }
    }

    /// A clock standing at `start_ms` until moved.
    pub fn manual(start_ms: i64) -> Self {
        Self { source: Arc::new(Source::Manual(Mutex::new(Manual { now: start_ms, sleepers: Vec::new() }))) }
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        match &*self.source {
            Source::System => system_epoch_ms(),
            Source::Tokio { base_instant, base_epoch_ms } => {
                let elapsed = i64::try_from(base_instant.elapsed().as_millis()).unwrap_or(i64::MAX);
                base_epoch_ms.saturating_add(elapsed)
            }
            Source::Manual(m) => lock(m).now,
        }
    }

    /// Resolves once [`Self::now_ms`] has reached `deadline_ms`. On a
    /// manual clock it resolves only when the clock is moved there; a
    /// dropped manual clock never wakes its sleepers (time stopped).
    pub fn sleep_until(&self, deadline_ms: i64) -> BoxFuture<'static, ()> {
        let Source::Manual(m) = &*self.source else {
            let wait = u64::try_from(deadline_ms.saturating_sub(self.now_ms())).unwrap_or(0);
            return tokio::time::sleep(Duration::from_millis(wait)).boxed();
        };
        let mut m = lock(m);
        if deadline_ms <= m.now {
            return futures::future::ready(()).boxed();
        }
        let (tx, rx) = oneshot::channel();
        m.sleepers.push((deadline_ms, tx));
        async move {
            if rx.await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        .boxed()
    }

    /// Moves a manual clock forward by `ms`; the other clocks move by
    /// themselves and ignore this.
    pub fn advance(&self, ms: i64) {
        if let Source::Manual(m) = &*self.source {
            let to = lock(m).now.saturating_add(ms);
            self.set(to);
        }
    }

    /// Moves a manual clock to `now_ms` (never backwards) and wakes the
    /// sleepers whose deadline has come; the other clocks ignore this.
    pub fn set(&self, now_ms: i64) {
        let Source::Manual(m) = &*self.source else { return };
        let due = {
            let mut m = lock(m);
            m.now = m.now.max(now_ms);
            let now = m.now;
            let (due, pending): (Vec<_>, Vec<_>) = m.sleepers.drain(..).partition(|(at, _)| *at <= now);
            m.sleepers = pending;
            due
        };
        for (_, wake) in due {
            let _ = wake.send(());
        }
    }

    /// A manual clock's earliest pending sleep deadline.
    pub fn next_deadline(&self) -> Option<i64> {
        match &*self.source {
            Source::Manual(m) => lock(m).sleepers.iter().map(|(at, _)| *at).min(),
            _ => None,
        }
    }

    /// How many sleepers a manual clock holds.
    pub fn sleepers(&self) -> usize {
        match &*self.source {
            Source::Manual(m) => lock(m).sleepers.len(),
            _ => 0,
        }
    }
}

impl Default for Clock {
    /// [`Clock::system`].
    fn default() -> Self {
        Self::system()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &*self.source {
            Source::System => "system",
            Source::Tokio { .. } => "tokio",
            Source::Manual(_) => "manual",
        };
        f.debug_struct("Clock").field("source", &kind).field("now_ms", &self.now_ms()).finish()
    }
}

fn lock(m: &Mutex<Manual>) -> MutexGuard<'_, Manual> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_reads_the_wall() {
        let before = system_epoch_ms();
        let read = Clock::system().now_ms();
        assert!(read >= before && read - before < 60_000, "{read} vs {before}");
    }

    #[tokio::test]
    async fn a_manual_clock_moves_only_when_told_and_wakes_its_sleepers() {
        let clock = Clock::manual(1_000);
        let shared = clock.clone();
        assert_eq!(clock.now_ms(), 1_000);
        let sleeper = tokio::spawn(clock.sleep_until(1_500));
        tokio::task::yield_now().await;
        assert_eq!(clock.sleepers(), 1);
        assert_eq!(clock.next_deadline(), Some(1_500));
        shared.advance(499);
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "woken before its deadline");
        shared.advance(1);
        sleeper.await.expect("the sleeper wakes at its deadline");
        assert_eq!(clock.now_ms(), 1_500);
        clock.set(1_200);
        assert_eq!(clock.now_ms(), 1_500, "a manual clock never goes back");
        clock.sleep_until(1_500).await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_tokio_clock_follows_paused_time() {
        let clock = Clock::tokio();
        let start = clock.now_ms();
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(clock.now_ms() - start >= 3_000);
        let before = clock.now_ms();
        clock.sleep_until(before + 10_000).await;
        assert!(clock.now_ms() >= before + 10_000);
    }
}
