//! CDN-collapsing cursors (§10.1): the current 20-second interval since
//! 2024-10-09T00:00:00Z, pushed strictly past the client's echoed cursor.

/// 2024-10-09T00:00:00Z in epoch milliseconds.
pub const CURSOR_EPOCH_MS: i64 = 1_728_432_000_000;
/// Interval length.
pub const INTERVAL_MS: i64 = 20_000;

/// The cursor for a live response at `now_ms`, given the client's echoed
/// `cursor` (if any) and a jitter draw `jitter_secs` in `1..=3600`.
///
/// When the client's cursor is not behind the current interval the answer
/// must still move forward, so the jitter (in whole intervals, at least one)
/// is added to the client's cursor; this breaks cache cycles.
pub fn next_cursor(now_ms: i64, client: Option<&str>, jitter_secs: u64) -> String {
    let current = (now_ms - CURSOR_EPOCH_MS).max(0) / INTERVAL_MS;
    let current = u64::try_from(current).unwrap_or(0);
    let client = client.and_then(|c| c.parse::<u64>().ok());
    let value = match client {
        Some(c) if c >= current => {
            let jitter_intervals = (jitter_secs.clamp(1, 3600) * 1000).div_ceil(INTERVAL_MS as u64).max(1);
            c.saturating_add(jitter_intervals)
        }
        _ => current,
    };
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn interval_number() {
        assert_eq!(next_cursor(CURSOR_EPOCH_MS + 45_000, None, 5), "2");
        assert_eq!(next_cursor(CURSOR_EPOCH_MS + 45_000, Some("1"), 5), "2");
        assert_eq!(next_cursor(CURSOR_EPOCH_MS + 45_000, Some("garbage"), 5), "2");
    }

    proptest! {
        #[test]
        fn never_behind_client(now in 0i64..4_000_000_000_000, c in 0u64..1_000_000_000, j in 1u64..=3600) {
            let out: u64 = next_cursor(now, Some(&c.to_string()), j).parse().unwrap_or(0);
            let current = next_cursor(now, None, j).parse::<u64>().unwrap_or(0);
            prop_assert!(out >= current);
            if c >= current { prop_assert!(out > c); }
        }
    }
}
