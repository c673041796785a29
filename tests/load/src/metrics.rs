//! The catalogue of metrics: what each measures, its unit and which
//! direction is better (the report orients every ratio by this).

/// Creates in flight in P7 (the definition), the concurrency its
/// rate is measured (and its ceiling calibrated) at.
pub const CREATE_IN_FLIGHT: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    P1OneStreamC1,
    P1OneStreamC64,
    P1ManyStreams,
    P1CpuOneStreamC1,
    P1CpuOneStreamC64,
    P1CpuManyStreams,
    P2ReadMbps,
    P2Responses,
    P3LongPollP50,
    P3LongPollP99,
    P3SseP50,
    P3SseP99,
    P4RssPerStream,
    P6ColdStart,
    P6BinarySize,
    P6StrippedSize,
    P7CreatesPerSec,
}

pub struct Info {
    pub title: &'static str,
    pub unit: &'static str,
    pub higher_is_better: bool,
    /// Digits after the decimal point in tables.
    pub decimals: usize,
}

impl Metric {
    pub const ALL: [Metric; 17] = [
        Metric::P1OneStreamC1,
        Metric::P1OneStreamC64,
        Metric::P1ManyStreams,
        Metric::P1CpuOneStreamC1,
        Metric::P1CpuOneStreamC64,
        Metric::P1CpuManyStreams,
        Metric::P2ReadMbps,
        Metric::P2Responses,
        Metric::P3LongPollP50,
        Metric::P3LongPollP99,
        Metric::P3SseP50,
        Metric::P3SseP99,
        Metric::P4RssPerStream,
        Metric::P6ColdStart,
        Metric::P6BinarySize,
        Metric::P6StrippedSize,
        Metric::P7CreatesPerSec,
    ];

    pub fn info(self) -> Info {
        let (title, unit, higher_is_better, decimals) = match self {
            Metric::P1OneStreamC1 => ("P1 append throughput, 1 stream, concurrency 1", "appends/s", true, 0),
            Metric::P1OneStreamC64 => ("P1 append throughput, 1 stream, concurrency 64", "appends/s", true, 0),
            Metric::P1ManyStreams => ("P1 append throughput, 64 streams × 1 writer", "appends/s", true, 0),
            Metric::P1CpuOneStreamC1 => ("P1 server CPU per append, 1 stream, concurrency 1", "µs/append", false, 1),
            Metric::P1CpuOneStreamC64 => ("P1 server CPU per append, 1 stream, concurrency 64", "µs/append", false, 1),
            Metric::P1CpuManyStreams => ("P1 server CPU per append, 64 streams × 1 writer", "µs/append", false, 1),
            Metric::P2ReadMbps => ("P2 catch-up read, 10,000 × 100 B from the start", "MB/s", true, 1),
            Metric::P2Responses => ("P2 responses needed to catch up", "responses", false, 0),
            Metric::P3LongPollP50 => ("P3 live wake latency, long-poll, p50", "µs", false, 0),
            Metric::P3LongPollP99 => ("P3 live wake latency, long-poll, p99", "µs", false, 0),
            Metric::P3SseP50 => ("P3 live wake latency, SSE, p50", "µs", false, 0),
            Metric::P3SseP99 => ("P3 live wake latency, SSE, p99", "µs", false, 0),
            Metric::P4RssPerStream => ("P4 resident memory per idle stream", "bytes/stream", false, 0),
            Metric::P6ColdStart => ("P6 cold start, spawn → first successful PUT", "ms", false, 1),
            Metric::P6BinarySize => ("P6 binary size on disk, as installed/built", "MB", false, 1),
            Metric::P6StrippedSize => ("P6 binary size, stripped (strip -o)", "MB", false, 1),
            Metric::P7CreatesPerSec => ("P7 stream creates, PUT with a 100 B body, 16 in flight", "creates/s", true, 0),
        };
        Info { title, unit, higher_is_better, decimals }
    }

    /// The workload (p1..p6) that produces this metric.
    pub fn workload(self) -> &'static str {
        match self {
            Metric::P1OneStreamC1
            | Metric::P1OneStreamC64
            | Metric::P1ManyStreams
            | Metric::P1CpuOneStreamC1
            | Metric::P1CpuOneStreamC64
            | Metric::P1CpuManyStreams => "p1",
            Metric::P2ReadMbps | Metric::P2Responses => "p2",
            Metric::P3LongPollP50 | Metric::P3LongPollP99 | Metric::P3SseP50 | Metric::P3SseP99 => "p3",
            Metric::P4RssPerStream => "p4",
            Metric::P6ColdStart | Metric::P6BinarySize | Metric::P6StrippedSize => "p6",
            Metric::P7CreatesPerSec => "p7",
        }
    }

    /// Requests in flight of a throughput metric (what the calibration
    /// ceiling is compared at); None for the others.
    pub fn concurrency(self, p1_concurrency: usize) -> Option<usize> {
        match self {
            Metric::P1OneStreamC1 => Some(1),
            Metric::P1OneStreamC64 | Metric::P1ManyStreams => Some(p1_concurrency),
            Metric::P7CreatesPerSec => Some(CREATE_IN_FLIGHT),
            _ => None,
        }
    }

    /// Speed and memory metrics, the candidates for "furthest behind" (the
    /// one to profile); binary sizes and P2's response count are context.
    pub fn is_performance(self) -> bool {
        !matches!(self, Metric::P2Responses | Metric::P6BinarySize | Metric::P6StrippedSize)
    }
}
