//! The source of jitter and randomized backoff.

use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, PoisonError};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Random numbers for timing decisions (backoff jitter, spreading wakes):
/// [`Random::system`] draws from the thread's generator (seeded by the
/// operating system), [`Random::seeded`] repeats the same sequence for a
/// test. Not for secrets (see the crate docs).
#[derive(Clone)]
pub struct Random {
    source: Arc<Source>,
}

enum Source {
    Thread,
    // Boxed: the generator's state is large and only tests seed one.
    Seeded(Mutex<Box<StdRng>>),
}

impl Random {
    /// The thread's generator, seeded by the operating system.
    pub fn system() -> Self {
        Self { source: Arc::new(Source::Thread) }
    }

    /// A generator that repeats one sequence for `seed`.
    pub fn seeded(seed: u64) -> Self {
        Self { source: Arc::new(Source::Seeded(Mutex::new(Box::new(StdRng::seed_from_u64(seed))))) }
    }

    /// A number in `range` (both ends included), uniformly.
    pub fn in_range(&self, range: RangeInclusive<u64>) -> u64 {
        match &*self.source {
            Source::Thread => rand::thread_rng().gen_range(range),
            Source::Seeded(rng) => rng.lock().unwrap_or_else(PoisonError::into_inner).gen_range(range),
        }
    }

    /// A number in `[0, 1)`, uniformly.
    pub fn unit(&self) -> f64 {
        match &*self.source {
            Source::Thread => rand::thread_rng().gen::<f64>(),
            Source::Seeded(rng) => rng.lock().unwrap_or_else(PoisonError::into_inner).gen::<f64>(),
        }
    }
}

impl Default for Random {
    /// [`Random::system`].
    fn default() -> Self {
        Self::system()
    }
}

impl std::fmt::Debug for Random {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &*self.source {
            Source::Thread => "system",
            Source::Seeded(_) => "seeded",
        };
        f.debug_struct("Random").field("source", &kind).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_repeats_its_sequence_and_ranges_hold() {
        let (a, b) = (Random::seeded(7), Random::seeded(7));
        let xs: Vec<u64> = (0..32).map(|_| a.in_range(10..=20)).collect();
        let ys: Vec<u64> = (0..32).map(|_| b.in_range(10..=20)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| (10..=20).contains(x)));
        assert!(xs.iter().any(|x| *x != xs[0]), "not constant");
        let system = Random::system();
        assert!((0..100).all(|_| (0.0..1.0).contains(&system.unit())));
        assert_eq!(system.in_range(5..=5), 5);
    }
}
