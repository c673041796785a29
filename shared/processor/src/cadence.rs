//! Checkpoint cadence: when settled work becomes the durable ack.
//!
//! The runner tracks `completed_through` in memory (every event whose blocking
//! work settled) and persists it as `acknowledged_through` per this policy.
//! The gap is the deliberate at-least-once replay window. Whatever the policy,
//! a checkpoint only ever writes `completed_through`, so it can never
//! acknowledge past unsettled blocking work.
//!
//! The policies only thin out checkpoints *during* a scan. When a scan
//! reaches the head (the runner goes idle) every policy checkpoints what
//! settled: an idle runner never sits on unacknowledged settled work, which
//! `wait_until_event` callers, lag metrics and the next host would all
//! otherwise wait on until more events arrive.
//!
//! An entry whose type the processor does not consume is not an event for
//! it: no call is made, and replaying it after a crash costs one decode, so
//! it checkpoints nothing by itself (`every event` once checkpointed after
//! each: a `state` processor, which consumes nothing, wrote one progress
//! record per message it passed). A run of them is checkpointed when the
//! scan reaches the head, by the next event's checkpoint, or every
//! [`SKIPPED_CHECKPOINT_ENTRIES`] entries / [`SKIPPED_CHECKPOINT_BYTES`]
//! of journal, which bounds what a restart reads again.

/// Policy for persisting progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointCadence {
    /// After every event (and eventless call).
    EveryEvent,
    /// After every `n` completed events, and when a scan reaches the head.
    EveryN(u32),
    /// After an event when at least `millis` passed since the last
    /// checkpoint, and when a scan reaches the head.
    Interval { millis: u64 },
    /// After an event when at least `bytes` of the journal (positions are
    /// byte offsets) completed since the last checkpoint, and when a scan
    /// reaches the head.
    EveryBytes(u64),
    /// When a scan reaches the head.
    Idle,
    /// When a transport frame (or `catch_up`) finishes, which is right after
    /// its scan reached the head.
    BatchEnd,
}

/// Entries not consumed in a row (since the last checkpoint) after which
/// the runner checkpoints whatever the policy (see the module docs).
pub const SKIPPED_CHECKPOINT_ENTRIES: u64 = 4096;
/// Journal bytes of entries not consumed after which the runner
/// checkpoints whatever the policy.
pub const SKIPPED_CHECKPOINT_BYTES: u64 = 1024 * 1024;

/// A point at which the runner asks the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moment {
    EventCompleted,
    /// An entry the processor does not consume completed.
    EntrySkipped,
    ScanIdle,
    BatchEnd,
    /// A clean stop flushes settled work whatever the policy.
    Drain,
}

/// Counters the policy reads; reset by every successful checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CadenceTracker {
    pub events_since_commit: u64,
    /// Journal bytes (position advance) completed since the checkpoint.
    pub bytes_since_commit: u64,
    pub last_commit_ms: u64,
    /// Entries not consumed, and their journal bytes, since the checkpoint.
    pub skipped_since_commit: u64,
    pub skipped_bytes_since_commit: u64,
}

impl CadenceTracker {
    pub(crate) fn new(now_ms: u64) -> Self {
        Self {
            events_since_commit: 0,
            bytes_since_commit: 0,
            last_commit_ms: now_ms,
            skipped_since_commit: 0,
            skipped_bytes_since_commit: 0,
        }
    }

    /// One more event completed, `bytes` of journal past the previous one.
    pub(crate) fn completed_one(&mut self, bytes: u64) {
        self.events_since_commit += 1;
        self.bytes_since_commit = self.bytes_since_commit.saturating_add(bytes);
    }

    /// One more entry not consumed completed, `bytes` past the previous one.
    pub(crate) fn skipped_one(&mut self, bytes: u64) {
        self.skipped_since_commit += 1;
        self.skipped_bytes_since_commit = self.skipped_bytes_since_commit.saturating_add(bytes);
        self.bytes_since_commit = self.bytes_since_commit.saturating_add(bytes);
    }

    pub(crate) fn committed(&mut self, now_ms: u64) {
        *self = Self::new(now_ms);
    }
}

impl CheckpointCadence {
    /// Whether to checkpoint now. The caller also requires that something was
    /// completed since the durable ack.
    pub(crate) fn is_due(self, moment: Moment, tracker: &CadenceTracker, now_ms: u64) -> bool {
        match (self, moment) {
            (_, Moment::Drain) => true,
            // Only a run long enough to be worth not reading again.
            (Self::BatchEnd, Moment::EntrySkipped) => false,
            (_, Moment::EntrySkipped) => {
                tracker.skipped_since_commit >= SKIPPED_CHECKPOINT_ENTRIES
                    || tracker.skipped_bytes_since_commit >= SKIPPED_CHECKPOINT_BYTES
            }
            (Self::EveryEvent, Moment::EventCompleted) => true,
            (Self::EveryN(n), Moment::EventCompleted) => tracker.events_since_commit >= u64::from(n.max(1)),
            (Self::Interval { millis }, Moment::EventCompleted) => {
                now_ms.saturating_sub(tracker.last_commit_ms) >= millis
            }
            (Self::EveryBytes(bytes), Moment::EventCompleted) => tracker.bytes_since_commit >= bytes.max(1),
            // Idle: whatever the policy, settled work is not left waiting
            // for more events to arrive.
            (
                Self::EveryEvent | Self::EveryN(_) | Self::Interval { .. } | Self::EveryBytes(_) | Self::Idle,
                Moment::ScanIdle,
            ) => true,
            (Self::BatchEnd, Moment::BatchEnd) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(events: u64, last: u64) -> CadenceTracker {
        CadenceTracker { events_since_commit: events, ..CadenceTracker::new(last) }
    }

    #[test]
    fn every_bytes_waits_for_that_much_journal() {
        let c = CheckpointCadence::EveryBytes(1000);
        let mut t = CadenceTracker::new(0);
        t.completed_one(600);
        assert!(!c.is_due(Moment::EventCompleted, &t, 0));
        t.completed_one(400);
        assert!(c.is_due(Moment::EventCompleted, &t, 0));
        t.committed(5);
        assert!(!c.is_due(Moment::EventCompleted, &t, 5), "a checkpoint resets the count");
        assert!(c.is_due(Moment::ScanIdle, &t, 5));
    }

    #[test]
    fn every_n_waits_for_n_events() {
        let c = CheckpointCadence::EveryN(3);
        assert!(!c.is_due(Moment::EventCompleted, &tracker(2, 0), 0));
        assert!(c.is_due(Moment::EventCompleted, &tracker(3, 0), 0));
    }

    #[test]
    fn every_policy_but_batch_end_checkpoints_when_the_scan_goes_idle() {
        for c in [
            CheckpointCadence::EveryEvent,
            CheckpointCadence::EveryN(100),
            CheckpointCadence::Interval { millis: 60_000 },
            CheckpointCadence::EveryBytes(1 << 30),
            CheckpointCadence::Idle,
        ] {
            assert!(c.is_due(Moment::ScanIdle, &tracker(1, 0), 1), "{c:?}");
        }
        // Batch end follows the idle scan at once and checkpoints there.
        assert!(!CheckpointCadence::BatchEnd.is_due(Moment::ScanIdle, &tracker(1, 0), 1));
    }

    #[test]
    fn interval_measures_time_since_last_commit() {
        let c = CheckpointCadence::Interval { millis: 50 };
        assert!(!c.is_due(Moment::EventCompleted, &tracker(9, 100), 149));
        assert!(c.is_due(Moment::EventCompleted, &tracker(1, 100), 150));
    }

    #[test]
    fn idle_and_batch_end_fire_only_at_their_moment_and_drain_always() {
        assert!(CheckpointCadence::Idle.is_due(Moment::ScanIdle, &tracker(1, 0), 0));
        assert!(!CheckpointCadence::Idle.is_due(Moment::EventCompleted, &tracker(1, 0), 0));
        assert!(CheckpointCadence::BatchEnd.is_due(Moment::BatchEnd, &tracker(1, 0), 0));
        assert!(!CheckpointCadence::BatchEnd.is_due(Moment::ScanIdle, &tracker(1, 0), 0));
        assert!(CheckpointCadence::EveryN(100).is_due(Moment::Drain, &tracker(1, 0), 0));
    }

    /// An entry not consumed is not an event: no policy checkpoints it by
    /// itself, until a run is long enough (entries or bytes), and never
    /// under `batch end`.
    #[test]
    fn skipped_entries_checkpoint_only_in_long_runs() {
        let policies = [
            CheckpointCadence::EveryEvent,
            CheckpointCadence::EveryN(1),
            CheckpointCadence::Interval { millis: 0 },
            CheckpointCadence::EveryBytes(1),
            CheckpointCadence::Idle,
        ];
        for c in policies {
            let mut t = CadenceTracker::new(0);
            t.skipped_one(100);
            assert!(!c.is_due(Moment::EntrySkipped, &t, 1_000_000), "{c:?}");
            assert!(c.is_due(Moment::ScanIdle, &t, 0), "{c:?}: the head still checkpoints it");
            let mut many = CadenceTracker::new(0);
            (0..SKIPPED_CHECKPOINT_ENTRIES).for_each(|_| many.skipped_one(1));
            assert!(c.is_due(Moment::EntrySkipped, &many, 0), "{c:?}: a long run");
            let mut big = CadenceTracker::new(0);
            big.skipped_one(SKIPPED_CHECKPOINT_BYTES);
            assert!(c.is_due(Moment::EntrySkipped, &big, 0), "{c:?}: a large run");
            // The bytes count toward `every N bytes` at the next event.
            assert_eq!(big.bytes_since_commit, SKIPPED_CHECKPOINT_BYTES);
        }
        let mut many = CadenceTracker::new(0);
        (0..2 * SKIPPED_CHECKPOINT_ENTRIES).for_each(|_| many.skipped_one(1024));
        assert!(!CheckpointCadence::BatchEnd.is_due(Moment::EntrySkipped, &many, 0));
    }
}
