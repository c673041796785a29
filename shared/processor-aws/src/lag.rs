//! What the processor function tells CloudWatch about its processors:
//! per processor, the lag (a stream's tail minus the processor's durable
//! acknowledged cursor, as the operator API computes it) at the end of its
//! drive, the maximum over the streams an invocation drove; and how many
//! revivals and background tasks failed. Written as EMF lines
//! ([`ds_metrics::emf::EmfMetrics`]), so no API call is made.
//!
//! The tail is the one the drive's last journal page reported
//! ([`crate::journal::DoorbellJournal::seen_tail`]): no read of its own, so
//! the batch still costs one journal read. A drive that caught up read past
//! its last entry, so that tail is the stream's then.

use std::collections::BTreeMap;
use std::sync::Mutex;

use ds_metrics::emf::{EmfMetrics, ProcessorLag};

/// Where the figures go.
pub trait PlaneMetrics: Send + Sync {
    /// `lag` (the maximum over `streams` streams) of processor `slug`.
    fn processor_lag(&self, slug: &str, lag: u64, streams: u64);
    /// `count` failures of `what` in one invocation.
    fn failures(&self, what: FailureKind, count: u64);
}

/// What failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// A revival invocation (it is retried, then lands on the on-failure destination).
    Revival,
    /// A background task's delivery (retried; dead-lettered after max receives).
    Task,
}

impl FailureKind {
    /// The EMF metric name.
    pub fn metric(self) -> &'static str {
        match self {
            Self::Revival => "RevivalFailures",
            Self::Task => "TaskFailures",
        }
    }
}

impl PlaneMetrics for EmfMetrics {
    fn processor_lag(&self, slug: &str, lag: u64, streams: u64) {
        EmfMetrics::processor_lag(self, &ProcessorLag { processor: slug, lag, streams });
    }

    fn failures(&self, what: FailureKind, count: u64) {
        self.count(what.metric(), count);
    }
}

/// One invocation's lag figures, per processor slug: `(max lag, streams)`.
#[derive(Default)]
pub struct LagBook(Mutex<BTreeMap<String, (u64, u64)>>);

impl LagBook {
    /// Processor `slug` ended its drive of a stream at `acknowledged` with
    /// the stream's tail at `tail`.
    pub fn note(&self, slug: &str, tail: u64, acknowledged: u64) {
        let mut book = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = book.entry(slug.to_owned()).or_default();
        entry.0 = entry.0.max(tail.saturating_sub(acknowledged));
        entry.1 += 1;
    }

    /// The figures noted since the last take: `(slug, max lag, streams)`.
    pub fn take(&self) -> Vec<(String, u64, u64)> {
        let mut book = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::take(&mut *book).into_iter().map(|(slug, (lag, streams))| (slug, lag, streams)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_book_keeps_the_maximum_per_processor_and_empties_when_taken() {
        let book = LagBook::default();
        book.note("relay", 10, 10);
        book.note("relay", 30, 5);
        book.note("count", 7, 9);
        assert_eq!(book.take(), [("count".to_owned(), 0, 1), ("relay".to_owned(), 25, 2)]);
        assert!(book.take().is_empty());
    }
}
