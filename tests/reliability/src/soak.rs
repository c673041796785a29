//! The soak: mixed load against a running server for a while, sampling its
//! resident memory and open descriptors, then checking every acknowledged
//! append is readable.
//!
//! Load: appenders with and without idempotent producers on long-lived
//! streams (self-checking records), catch-up readers, long-poll and SSE
//! tailers, and a churn task that creates, appends, forks, reads and deletes
//! streams and creates TTL streams it then watches expire.
//!
//! The data stays bounded, so memory can be judged in a steady state (a
//! store's caches grow with the data they hold): after [`ROTATE_AT`]
//! appends an appender checks its stream holds exactly what was
//! acknowledged, moves to the stream's next generation (readers follow),
//! and deletes the old one [`ROTATE_GRACE`] later, once no reader is on it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ds_e2e::{client, header, read_all, record};

use crate::procfs;

/// Long-lived streams the appenders write to.
const STREAMS: u32 = 8;
/// Appenders: the even ones use producer headers, the odd ones do not.
const APPENDERS: u32 = 8;
/// Appends per stream generation (about 0.7 MB of records).
const ROTATE_AT: u64 = 2_000;
/// An old generation is deleted this long after the switch: longer than any
/// reader stays on it (a long-poll or a 5 s SSE connection).
const ROTATE_GRACE: Duration = Duration::from_secs(15);

/// One sample of the server process.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: Duration,
    pub rss: u64,
    pub fds: usize,
    pub appends: u64,
    pub reads: u64,
}

/// What a soak saw.
#[derive(Debug, Default)]
pub struct SoakReport {
    pub samples: Vec<Sample>,
    pub appends: u64,
    pub reads: u64,
    pub sse_events: u64,
    pub churned: u64,
    pub expired: u64,
    /// Stream generations checked whole and deleted.
    pub rotations: u64,
    pub errors: Vec<String>,
    pub error_count: u64,
    /// Acknowledged appends found in the streams at the end (all of them, or an error says which not).
    pub verified: u64,
}

#[derive(Default)]
struct Counters {
    appends: AtomicU64,
    reads: AtomicU64,
    sse_events: AtomicU64,
    churned: AtomicU64,
    expired: AtomicU64,
    errors: AtomicU64,
    stop: AtomicBool,
    log: Mutex<Vec<String>>,
    /// Per appender: batches acknowledged (0..n) in the current generation.
    acked: Mutex<BTreeMap<u32, u64>>,
    /// Per stream: the generation appenders and readers use now.
    generation: [AtomicU64; STREAMS as usize],
    /// Acknowledged appends found in rotated generations.
    rotated_verified: AtomicU64,
    rotations: AtomicU64,
}

impl Counters {
    fn error(&self, msg: String) {
        self.errors.fetch_add(1, Relaxed);
        let mut log = self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if log.len() < 100 {
            log.push(msg);
        }
    }
    fn stopped(&self) -> bool {
        self.stop.load(Relaxed)
    }
    fn generation(&self, s: u32) -> u64 {
        self.generation[s as usize].load(Relaxed)
    }
}

fn stream_url(base: &str, s: u32, generation: u64) -> String {
    format!("{base}/v1/stream/soak/s{s}/g{generation}")
}

/// Run the soak against `base` for `duration`, sampling process `pid`.
pub async fn run(base: &str, pid: u32, duration: Duration, every: Duration) -> anyhow::Result<SoakReport> {
    let http = client();
    for s in 0..STREAMS {
        let resp = http.put(stream_url(base, s, 0)).header("content-type", "application/octet-stream").send().await?;
        anyhow::ensure!(resp.status().is_success(), "creating stream {s}: {}", resp.status());
    }
    let c = Arc::new(Counters::default());
    let mut tasks = Vec::new();
    for a in 0..APPENDERS {
        tasks.push(tokio::spawn(appender(base.to_owned(), Arc::clone(&c), a)));
    }
    for r in 0..2 {
        tasks.push(tokio::spawn(catch_up(base.to_owned(), Arc::clone(&c), r)));
    }
    for r in 0..4 {
        tasks.push(tokio::spawn(long_poll(base.to_owned(), Arc::clone(&c), r % STREAMS)));
    }
    for r in 0..2 {
        tasks.push(tokio::spawn(sse(base.to_owned(), Arc::clone(&c), r % STREAMS)));
    }
    tasks.push(tokio::spawn(churn(base.to_owned(), Arc::clone(&c))));

    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < duration {
        samples.push(Sample {
            at: started.elapsed(),
            rss: procfs::rss_bytes(pid)?,
            fds: procfs::open_fds(pid)?,
            appends: c.appends.load(Relaxed),
            reads: c.reads.load(Relaxed),
        });
        tokio::time::sleep(every.min(duration.saturating_sub(started.elapsed()))).await;
    }
    c.stop.store(true, Relaxed);
    for t in tasks {
        t.await?;
    }
    samples.push(Sample {
        at: started.elapsed(),
        rss: procfs::rss_bytes(pid)?,
        fds: procfs::open_fds(pid)?,
        appends: c.appends.load(Relaxed),
        reads: c.reads.load(Relaxed),
    });
    let verified = verify(base, &c).await;
    let log = c.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    Ok(SoakReport {
        samples,
        appends: c.appends.load(Relaxed),
        reads: c.reads.load(Relaxed),
        sse_events: c.sse_events.load(Relaxed),
        churned: c.churned.load(Relaxed),
        expired: c.expired.load(Relaxed),
        rotations: c.rotations.load(Relaxed),
        error_count: c.errors.load(Relaxed),
        errors: log,
        verified,
    })
}

/// Append records `0, 1, 2, ...` of appender `a` to stream `a % STREAMS`,
/// moving to the stream's next generation every [`ROTATE_AT`] appends.
/// Producer appenders retry a failed request with the same sequence number;
/// plain ones count any failure as an error (a retry could duplicate).
async fn appender(base: String, c: Arc<Counters>, a: u32) {
    let http = client();
    let s = a % STREAMS;
    let producer = a % 2 == 0;
    let mut seq = 0u64;
    while !c.stopped() {
        let generation = c.generation(s);
        if seq == ROTATE_AT {
            if rotate(&http, &base, &c, a, generation).await {
                seq = 0;
            } else {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            continue;
        }
        let url = stream_url(&base, s, generation);
        let mut req = http.post(&url).header("content-type", "application/octet-stream").body(record::encode(a, seq));
        if producer {
            req = req
                .header("producer-id", format!("soak-{a}"))
                .header("producer-epoch", "0")
                .header("producer-seq", seq.to_string());
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => {
                seq += 1;
                c.acked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(a, seq);
                c.appends.fetch_add(1, Relaxed);
            }
            Ok(r) => c.error(format!("append {a}/{seq}: {}", r.status())),
            Err(e) => c.error(format!("append {a}/{seq}: {e}")),
        }
    }
}

/// Check that generation `g` of appender `a`'s stream holds exactly its
/// [`ROTATE_AT`] acknowledged records, create generation `g + 1` and switch
/// everyone to it, and delete `g` after [`ROTATE_GRACE`]. Whether the
/// switch happened (else it is retried).
async fn rotate(http: &reqwest::Client, base: &str, c: &Arc<Counters>, a: u32, g: u64) -> bool {
    let s = a % STREAMS;
    let old = stream_url(base, s, g);
    match read_all(http, &old).await.map(|(b, _)| record::parse(&b)) {
        Ok(Ok(records)) => {
            let exact = records.len() as u64 == ROTATE_AT
                && records.iter().zip(0..).all(|(r, seq)| r.producer == a && r.seq == seq);
            if exact {
                c.rotated_verified.fetch_add(ROTATE_AT, Relaxed);
            } else {
                c.error(format!(
                    "s{s}/g{g}: {} records, not exactly seq 0..{ROTATE_AT} of appender {a}",
                    records.len()
                ));
            }
        }
        Ok(Err(e)) => c.error(format!("s{s}/g{g} before rotation: {e}")),
        Err(e) => c.error(format!("s{s}/g{g} before rotation: {e:#}")),
    }
    let next = stream_url(base, s, g + 1);
    match http.put(&next).header("content-type", "application/octet-stream").send().await {
        Ok(r) if r.status().as_u16() == 201 => {}
        other => {
            c.error(format!("creating s{s}/g{}: {:?}", g + 1, other.map(|r| r.status())));
            return false;
        }
    }
    c.acked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(a, 0);
    c.generation[s as usize].store(g + 1, Relaxed);
    c.rotations.fetch_add(1, Relaxed);
    let (http, c) = (http.clone(), Arc::clone(c));
    tokio::spawn(async move {
        tokio::time::sleep(ROTATE_GRACE).await;
        if c.stopped() {
            return;
        }
        match http.delete(&old).send().await {
            Ok(r) if r.status().as_u16() == 204 => {}
            other => c.error(format!("deleting s{s}/g{g}: {:?}", other.map(|r| r.status()))),
        }
    });
    true
}

/// Read random long-lived streams whole; they must parse into records.
async fn catch_up(base: String, c: Arc<Counters>, r: u32) {
    let http = client();
    let mut s = r;
    while !c.stopped() {
        s = (s + 1) % STREAMS;
        match read_all(&http, &stream_url(&base, s, c.generation(s))).await {
            Ok((bytes, _)) => match record::parse(&bytes) {
                Ok(_) => {
                    c.reads.fetch_add(1, Relaxed);
                }
                Err(e) => c.error(format!("catch-up read of s{s}: {e}")),
            },
            Err(e) => c.error(format!("catch-up read of s{s}: {e:#}")),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Tail stream `s` with long-polls from its current end.
async fn long_poll(base: String, c: Arc<Counters>, s: u32) {
    let http = client();
    let mut generation = c.generation(s);
    let mut offset = "now".to_owned();
    while !c.stopped() {
        if c.generation(s) != generation {
            generation = c.generation(s);
            offset = "now".to_owned();
        }
        let url = stream_url(&base, s, generation);
        match http.get(format!("{url}?offset={offset}&live=long-poll")).send().await {
            Ok(r) if r.status().is_success() => {
                if let Some(next) = header(&r, "stream-next-offset") {
                    offset = next;
                }
                let _ = r.bytes().await;
                c.reads.fetch_add(1, Relaxed);
            }
            Ok(r) => c.error(format!("long-poll of s{s}: {}", r.status())),
            Err(e) => c.error(format!("long-poll of s{s}: {e}")),
        }
    }
}

/// Tail stream `s` over SSE, one connection after another (each ends at the
/// server's SSE duration or after 5 s here).
async fn sse(base: String, c: Arc<Counters>, s: u32) {
    use futures::StreamExt;
    let http = client();
    while !c.stopped() {
        let url = format!("{}?offset=now&live=sse", stream_url(&base, s, c.generation(s)));
        let resp = match http.get(&url).send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                c.error(format!("SSE of s{s}: {}", r.status()));
                continue;
            }
            Err(e) => {
                c.error(format!("SSE of s{s}: {e}"));
                continue;
            }
        };
        let mut body = resp.bytes_stream();
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && !c.stopped() {
            match tokio::time::timeout(Duration::from_millis(500), body.next()).await {
                Ok(Some(Ok(chunk))) => {
                    let events = chunk.windows(2).filter(|w| w == b"\n\n").count() as u64;
                    c.sse_events.fetch_add(events, Relaxed);
                }
                Ok(Some(Err(e))) => {
                    c.error(format!("SSE body of s{s}: {e}"));
                    break;
                }
                Ok(None) => break,
                Err(_) => {}
            }
        }
    }
}

/// Create, append, fork, read and delete short-lived streams; create TTL
/// streams and check they expire.
async fn churn(base: String, c: Arc<Counters>) {
    let http = client();
    let mut i = 0u64;
    let mut ttl_streams: Vec<(String, Instant)> = Vec::new();
    while !c.stopped() {
        i += 1;
        if let Err(e) = churn_once(&http, &base, i).await {
            c.error(format!("churn {i}: {e:#}"));
        } else {
            c.churned.fetch_add(1, Relaxed);
        }
        // A stream with a 1 s TTL, checked 3 s later.
        let url = format!("{base}/v1/stream/soak/ttl-{i}");
        match http.put(&url).header("content-type", "text/plain").header("stream-ttl", "1").send().await {
            Ok(r) if r.status().as_u16() == 201 => ttl_streams.push((url, Instant::now())),
            other => c.error(format!("creating TTL stream {i}: {:?}", other.map(|r| r.status()))),
        }
        let (due, later): (Vec<_>, Vec<_>) =
            ttl_streams.drain(..).partition(|(_, at)| at.elapsed() > Duration::from_secs(3));
        ttl_streams = later;
        for (url, _) in due {
            match http.head(&url).send().await {
                Ok(r) if r.status().as_u16() == 404 => {
                    c.expired.fetch_add(1, Relaxed);
                }
                other => c.error(format!("TTL stream {url} not expired: {:?}", other.map(|r| r.status()))),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn churn_once(http: &reqwest::Client, base: &str, i: u64) -> anyhow::Result<()> {
    let src = format!("{base}/v1/stream/soak/churn-{i}");
    let fork = format!("{base}/v1/stream/soak/churn-{i}-fork");
    let expect = |what: &str, got: u16, want: u16| {
        anyhow::ensure!(got == want, "{what}: {got}, want {want}");
        Ok(())
    };
    let put = http.put(&src).header("content-type", "text/plain").body("hello ").send().await?;
    expect("create", put.status().as_u16(), 201)?;
    let post = http.post(&src).header("content-type", "text/plain").body("world").send().await?;
    expect("append", post.status().as_u16(), 204)?;
    let next = header(&post, "stream-next-offset").unwrap_or_default();
    let forked = http
        .put(&fork)
        .header("content-type", "text/plain")
        .header("stream-forked-from", format!("/v1/stream/soak/churn-{i}"))
        .header("stream-fork-offset", next)
        .send()
        .await?;
    expect("fork", forked.status().as_u16(), 201)?;
    let (bytes, _) = read_all(http, &fork).await?;
    anyhow::ensure!(bytes == b"hello world", "fork reads {:?}", String::from_utf8_lossy(&bytes));
    for url in [&fork, &src] {
        expect("delete", http.delete(url).send().await?.status().as_u16(), 204)?;
    }
    Ok(())
}

/// Every acknowledged append of every appender is in its stream's current
/// generation, once and in order. Returns how many were found, with those
/// checked in rotated generations.
async fn verify(base: &str, c: &Counters) -> u64 {
    let http = client();
    let acked = c.acked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let mut found = c.rotated_verified.load(Relaxed);
    for s in 0..STREAMS {
        let records = match read_all(&http, &stream_url(base, s, c.generation(s))).await.map(|(b, _)| record::parse(&b))
        {
            Ok(Ok(records)) => records,
            Ok(Err(e)) => return fail(c, format!("final read of s{s}: {e}"), found),
            Err(e) => return fail(c, format!("final read of s{s}: {e:#}"), found),
        };
        let mut next: BTreeMap<u32, u64> = BTreeMap::new();
        for r in records {
            let want = next.entry(r.producer).or_default();
            if r.seq != *want {
                return fail(
                    c,
                    format!("s{s}: appender {} seq {} where {} was expected", r.producer, r.seq, want),
                    found,
                );
            }
            *want += 1;
        }
        for a in (0..APPENDERS).filter(|a| a % STREAMS == s) {
            let (have, want) = (next.get(&a).copied().unwrap_or(0), acked.get(&a).copied().unwrap_or(0));
            // At most one more than acknowledged: the request cut off by the stop.
            if have < want || have > want + 1 {
                return fail(c, format!("s{s}: appender {a} has {have} records, {want} acknowledged"), found);
            }
            found += want;
        }
    }
    found
}

fn fail(c: &Counters, msg: String, found: u64) -> u64 {
    c.error(msg);
    found
}

impl SoakReport {
    /// Growth of resident memory: median of the last fifth of the run over
    /// the median of the fifth after `warm_up`, as a fraction.
    pub fn rss_growth(&self, warm_up: Duration) -> f64 {
        let after: Vec<&Sample> = self.samples.iter().filter(|s| s.at >= warm_up).collect();
        let fifth = (after.len() / 5).max(1);
        let median = |xs: &[&Sample]| {
            let mut v: Vec<u64> = xs.iter().map(|s| s.rss).collect();
            v.sort_unstable();
            v.get(v.len() / 2).copied().unwrap_or(0) as f64
        };
        let (first, last) =
            (median(&after[..fifth.min(after.len())]), median(&after[after.len().saturating_sub(fifth)..]));
        if first == 0.0 {
            return 0.0;
        }
        (last - first) / first
    }

    /// (min, max) open descriptors after `warm_up`.
    pub fn fd_range(&self, warm_up: Duration) -> (usize, usize) {
        let fds = self.samples.iter().filter(|s| s.at >= warm_up).map(|s| s.fds);
        let (mut lo, mut hi) = (usize::MAX, 0);
        for f in fds {
            lo = lo.min(f);
            hi = hi.max(f);
        }
        (lo, hi)
    }

    /// The report as Markdown: summary, then one row per sample.
    pub fn markdown(&self, title: &str, warm_up: Duration, preamble: &str) -> String {
        let (lo, hi) = self.fd_range(warm_up);
        let mut out = format!("# {title}\n\n{preamble}\n\n");
        let _ = writeln!(out, "| figure | value |\n|---|---|");
        let rows = [
            ("appends acknowledged", self.appends.to_string()),
            ("acknowledged appends readable at the end", format!("{} of {}", self.verified, self.appends)),
            ("whole-stream and long-poll reads", self.reads.to_string()),
            ("SSE events received", self.sse_events.to_string()),
            ("streams created, appended, forked, read and deleted", self.churned.to_string()),
            ("TTL streams seen expired", self.expired.to_string()),
            ("stream generations checked whole and rotated", self.rotations.to_string()),
            ("errors", self.error_count.to_string()),
            (
                "resident memory growth after warm-up",
                format!(
                    "{:+.1}% (median of the last fifth vs the first fifth after {}s)",
                    self.rss_growth(warm_up) * 100.0,
                    warm_up.as_secs()
                ),
            ),
            ("open descriptors after warm-up (min–max)", format!("{lo}–{hi}")),
        ];
        for (k, v) in rows {
            let _ = writeln!(out, "| {k} | {v} |");
        }
        if !self.errors.is_empty() {
            let _ = writeln!(out, "\nFirst errors:\n");
            for e in &self.errors {
                let _ = writeln!(out, "- {e}");
            }
        }
        let _ = writeln!(
            out,
            "\n## Curve\n\n| t (s) | RSS (MiB) | open fds | appends | reads |\n|---:|---:|---:|---:|---:|"
        );
        for s in &self.samples {
            let _ = writeln!(
                out,
                "| {:.0} | {:.1} | {} | {} | {} |",
                s.at.as_secs_f64(),
                s.rss as f64 / (1 << 20) as f64,
                s.fds,
                s.appends,
                s.reads
            );
        }
        out
    }
}
