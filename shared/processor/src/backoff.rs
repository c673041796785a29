//! Retry delays for failed blocking work.

/// Exponential backoff without jitter: blocking work of one processor is a
/// single in-flight chain, so there is no herd to spread, and determinism
/// keeps the harness reproducible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial_ms: u64,
    pub max_ms: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { initial_ms: 100, max_ms: 60_000 }
    }
}

impl Backoff {
    /// Delay before retry number `attempt` (1 = first retry).
    pub fn delay_ms(&self, attempt: u32) -> u64 {
        let shift = attempt.saturating_sub(1).min(40);
        self.initial_ms.saturating_mul(1u64 << shift).min(self.max_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_then_caps() {
        let b = Backoff { initial_ms: 10, max_ms: 100 };
        let delays: Vec<u64> = (1..=6).map(|a| b.delay_ms(a)).collect();
        assert_eq!(delays, vec![10, 20, 40, 80, 100, 100]);
        assert_eq!(b.delay_ms(u32::MAX), 100);
    }
}
