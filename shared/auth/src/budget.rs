//! Request budgets per credential (protocol §12.5, `429`): a token bucket
//! per principal subject — the static token's name or the JWT's `sub` — so
//! one client's flood spends its own budget and nobody else's. Off unless
//! configured; a credential can have its own budget, or none.
//!
//! The buckets live in the process that checks them: the local server has
//! one per credential; each Lambda execution environment has its own, so a
//! credential served by N environments at once gets up to N times its budget
//! (put a shared limiter in front when that matters).
//!
//! Memory is bounded: at most [`MAX_BUCKETS`] subjects are remembered; past
//! that, full buckets (no different from a new one) are forgotten first,
//! then the whole shard — which can only happen with that many distinct
//! valid credentials active at once, and errs towards more budget, not less.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most subjects with a bucket at once.
pub const MAX_BUCKETS: usize = 65_536;
const SHARDS: usize = 16;

/// A sustained rate and the burst a full bucket allows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u32,
}

impl Rate {
    /// `N/s`, `N/min` or `N/h`, optionally `:BURST` (default: one second's
    /// worth, at least 1): `100/s`, `6000/min`, `10/s:50`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("rate {spec:?}: {why} (expected N/s, N/min or N/h, optionally :BURST)");
        let (rate, burst) = match spec.trim().split_once(':') {
            Some((rate, burst)) => (rate, Some(burst)),
            None => (spec.trim(), None),
        };
        let (n, unit) = rate.split_once('/').ok_or_else(|| bad("no unit"))?;
        let n: u32 = n.trim().parse().map_err(|_| bad("N must be a whole number"))?;
        let seconds = match unit.trim() {
            "s" => 1.0,
            "min" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad("unknown unit")),
        };
        if n == 0 {
            return Err(bad("N must be at least 1 (use `off` for no budget)"));
        }
        let per_second = f64::from(n) / seconds;
        let burst = match burst {
            Some(b) => b.trim().parse::<u32>().ok().filter(|b| *b >= 1).ok_or_else(|| bad("BURST must be ≥ 1"))?,
            None => (per_second.ceil() as u32).max(1),
        };
        Ok(Self { per_second, burst })
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/s, burst {}", self.per_second, self.burst)
    }
}

/// A spent budget: when the next request would be admitted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exhausted {
    pub retry_after: Duration,
    pub rate: Rate,
}

impl Exhausted {
    /// `Retry-After` in whole seconds, at least 1.
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_secs_f64().ceil().max(1.0) as u64
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refilled(self, rate: Rate, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + elapsed * rate.per_second).min(f64::from(rate.burst))
    }
}

/// The configured budgets and their buckets.
pub struct Budgets {
    default: Option<Rate>,
    /// A credential's own budget (`None`: unlimited), by subject.
    named: HashMap<String, Option<Rate>>,
    hasher: std::collections::hash_map::RandomState,
    shards: [Mutex<HashMap<String, Bucket>>; SHARDS],
}

impl Budgets {
    /// `None` when no credential has a budget. `named`: `(subject, budget)`,
    /// `None` meaning no budget for that credential.
    pub fn new(default: Option<Rate>, named: Vec<(String, Option<Rate>)>) -> Option<Self> {
        if default.is_none() && named.iter().all(|(_, r)| r.is_none()) {
            return None;
        }
        Some(Self {
            default,
            named: named.into_iter().collect(),
            hasher: Default::default(),
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
        })
    }

    /// Parses `NAME=SPEC` (`SPEC` as [`Rate::parse`], or `off`).
    pub fn parse_named(item: &str) -> Result<(String, Option<Rate>), String> {
        let (name, spec) =
            item.split_once('=').ok_or_else(|| format!("{item:?}: expected NAME=RATE (e.g. ci=100/s) or NAME=off"))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(format!("{item:?}: the credential name is empty"));
        }
        let rate = if spec.trim() == "off" { None } else { Some(Rate::parse(spec)?) };
        Ok((name.to_owned(), rate))
    }

    /// The budget of `subject`, if it has one.
    pub fn rate_of(&self, subject: &str) -> Option<Rate> {
        match self.named.get(subject) {
            Some(own) => *own,
            None => self.default,
        }
    }

    /// Spend one request of `subject`'s budget now.
    pub fn take(&self, subject: &str) -> Result<(), Exhausted> {
        self.take_at(subject, Instant::now())
    }

    /// Spend one request of `subject`'s budget at `now`.
    pub fn take_at(&self, subject: &str, now: Instant) -> Result<(), Exhausted> {
        let Some(rate) = self.rate_of(subject) else { return Ok(()) };
        let shard = &self.shards[(self.hasher.hash_one(subject) as usize) % SHARDS];
        let mut buckets = shard.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let bucket = match buckets.get_mut(subject) {
            Some(b) => {
                *b = Bucket { tokens: b.refilled(rate, now), at: now };
                b
            }
            None => {
                if buckets.len() >= MAX_BUCKETS / SHARDS {
                    buckets.retain(|_, b| b.refilled(rate, now) < f64::from(rate.burst));
                    if buckets.len() >= MAX_BUCKETS / SHARDS {
                        buckets.clear();
                    }
                }
                buckets.entry(subject.to_owned()).or_insert(Bucket { tokens: f64::from(rate.burst), at: now })
            }
        };
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let retry_after = Duration::from_secs_f64((1.0 - bucket.tokens) / rate.per_second);
        Err(Exhausted { retry_after, rate })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rates_parse_with_a_unit_and_an_optional_burst() {
        assert_eq!(Rate::parse("100/s").unwrap(), Rate { per_second: 100.0, burst: 100 });
        assert_eq!(Rate::parse("6000/min").unwrap(), Rate { per_second: 100.0, burst: 100 });
        assert_eq!(Rate::parse("10/s:50").unwrap(), Rate { per_second: 10.0, burst: 50 });
        assert_eq!(Rate::parse("1/h").unwrap().burst, 1);
        for bad in ["100", "0/s", "10/day", "x/s", "10/s:0", "10/s:x", "-1/s"] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Budgets::parse_named("ci=off").unwrap(), ("ci".into(), None));
        assert_eq!(Budgets::parse_named(" ci = 2/s ").unwrap().1, Some(Rate { per_second: 2.0, burst: 2 }));
        assert!(Budgets::parse_named("=2/s").is_err());
        assert!(Budgets::parse_named("ci").is_err());
    }

    #[test]
    fn a_bucket_admits_its_burst_then_its_rate_and_says_when() {
        let budgets = Budgets::new(Some(Rate::parse("2/s:3").unwrap()), vec![]).unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(budgets.take_at("a", t0).is_ok());
        }
        let spent = budgets.take_at("a", t0).unwrap_err();
        assert_eq!(spent.retry_after, Duration::from_millis(500));
        assert_eq!(spent.retry_after_secs(), 1);
        assert!(budgets.take_at("b", t0).is_ok(), "another credential has its own bucket");
        assert!(budgets.take_at("a", t0 + Duration::from_millis(499)).is_err());
        assert!(budgets.take_at("a", t0 + Duration::from_millis(1000)).is_ok(), "refilled at 2/s");
        // A long pause refills to the burst, not beyond.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert!(budgets.take_at("a", later).is_ok());
        }
        assert!(budgets.take_at("a", later).is_err());
    }

    #[test]
    fn own_budgets_override_the_default() {
        let slow = Rate::parse("1/min").unwrap();
        let budgets = Budgets::new(None, vec![("slow".into(), Some(slow)), ("free".into(), None)]).unwrap();
        let t0 = Instant::now();
        assert!(budgets.take_at("slow", t0).is_ok());
        let spent = budgets.take_at("slow", t0).unwrap_err();
        assert_eq!(spent.retry_after_secs(), 60);
        for _ in 0..1000 {
            assert!(budgets.take_at("free", t0).is_ok());
            assert!(budgets.take_at("anyone-else", t0).is_ok(), "no default budget");
        }
        assert!(Budgets::new(None, vec![("x".into(), None)]).is_none(), "nothing limited: no budgets");
    }

    #[test]
    fn memory_stays_bounded_by_the_number_of_subjects() {
        let budgets = Budgets::new(Some(Rate::parse("1/h").unwrap()), vec![]).unwrap();
        let t0 = Instant::now();
        for i in 0..(MAX_BUCKETS * 2) {
            let _ = budgets.take_at(&format!("s{i}"), t0);
        }
        let held: usize = budgets.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(held <= MAX_BUCKETS, "{held}");
    }
}
