//! The adversarial campaign: workers send generated [`Case`]s over raw
//! connections, judge every outcome, and interleave idempotent-producer
//! appends to a ledger stream whose content is checked at the end (every
//! acknowledged append readable, exactly once, in order).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::client::{Conn, Outcome, Response, Target};
use crate::gen::{self, After, Case, Generator, Names, Req};

/// How a campaign runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Generated requests in total (ledger appends not included).
    pub requests: usize,
    pub workers: u32,
    pub seed: u64,
    /// Longest wait for one response (or close) before the connection
    /// counts as hung: above every server timeout in play.
    pub deadline: Duration,
    /// A ledger append after this many cases (on the same connection when
    /// it is still open).
    pub ledger_every: usize,
    /// Namespace of this run's ledger streams.
    pub run: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            requests: 5_000,
            workers: 16,
            seed: 1,
            deadline: Duration::from_secs(10),
            ledger_every: 10,
            run: format!("r{}", std::process::id()),
        }
    }
}

/// Counts per case category.
#[derive(Debug, Default, Clone)]
pub struct KindCounts {
    pub tried: u64,
    pub status: BTreeMap<u16, u64>,
    pub closed: u64,
    pub hung: u64,
}

/// What a campaign saw.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub tried: u64,
    pub server_errors: u64,
    pub hung: u64,
    pub closed_unanswered: u64,
    /// `501` for the reserved `__ds` prefix (documented, not a server error).
    pub reserved_501: u64,
    pub ledger_acked: u64,
    pub ledger_bytes: u64,
    /// Ledger appends acknowledged, per worker.
    pub ledger: BTreeMap<u32, u64>,
    pub by_kind: BTreeMap<&'static str, KindCounts>,
    pub failures: Vec<String>,
    pub elapsed: Duration,
}

impl Report {
    fn merge(&mut self, other: Report) {
        self.tried += other.tried;
        self.server_errors += other.server_errors;
        self.hung += other.hung;
        self.closed_unanswered += other.closed_unanswered;
        self.reserved_501 += other.reserved_501;
        self.ledger_acked += other.ledger_acked;
        self.ledger_bytes += other.ledger_bytes;
        self.ledger.extend(other.ledger);
        for (kind, c) in other.by_kind {
            let mine = self.by_kind.entry(kind).or_default();
            mine.tried += c.tried;
            mine.closed += c.closed;
            mine.hung += c.hung;
            for (s, n) in c.status {
                *mine.status.entry(s).or_default() += n;
            }
        }
        self.failures.extend(other.failures);
    }

    /// A plain-text summary, one line per category.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "requests tried: {}, 5xx: {}, hung connections: {}, closed without answer (well-formed requests): {}, \
             501 for the reserved __ds prefix: {}, ledger appends acknowledged: {} ({} bytes), failures: {}, \
             elapsed: {:.1}s\n",
            self.tried,
            self.server_errors,
            self.hung,
            self.closed_unanswered,
            self.reserved_501,
            self.ledger_acked,
            self.ledger_bytes,
            self.failures.len(),
            self.elapsed.as_secs_f64()
        );
        for (kind, c) in &self.by_kind {
            let statuses: Vec<String> = c.status.iter().map(|(s, n)| format!("{s}x{n}")).collect();
            let _ = writeln!(
                out,
                "  {kind:<22} tried {:>6}  closed {:>5}  hung {:>3}  statuses {}",
                c.tried,
                c.closed,
                c.hung,
                statuses.join(" ")
            );
        }
        out
    }
}

/// Run the campaign against `target`: every worker creates its streams,
/// sends its share of cases, then its ledger is verified.
pub async fn run(target: Arc<dyn Target>, settings: Settings) -> Report {
    let started = Instant::now();
    let report = Arc::new(Mutex::new(Report::default()));
    let mut tasks = Vec::new();
    for w in 0..settings.workers {
        let share = settings.requests / settings.workers as usize
            + usize::from((w as usize) < settings.requests % settings.workers as usize);
        let (target, settings, report) = (Arc::clone(&target), settings.clone(), Arc::clone(&report));
        tasks.push(tokio::spawn(async move {
            let worker = Worker::new(target, settings, w);
            let mine = worker.run(share).await;
            report.lock().unwrap_or_else(std::sync::PoisonError::into_inner).merge(mine);
        }));
    }
    for t in tasks {
        if let Err(e) = t.await {
            report.lock().unwrap_or_else(std::sync::PoisonError::into_inner).failures.push(format!("worker died: {e}"));
        }
    }
    let mut report = report.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    report.elapsed = started.elapsed();
    report
}

/// What worker `w`'s ledger must hold after `n` acknowledged appends.
pub fn ledger_content(w: u32, n: u64) -> Vec<u8> {
    (0..n).flat_map(|s| ledger_payload(w, s)).collect()
}

/// The body of ledger append `seq` of worker `w`: unique and checkable.
pub fn ledger_payload(w: u32, seq: u64) -> Vec<u8> {
    let filler = "abcdefghijklmnopqrstuvwxyz".repeat((seq % 5) as usize + 1);
    format!("<w{w}:s{seq}:{filler}>").into_bytes()
}

struct Worker {
    target: Arc<dyn Target>,
    settings: Settings,
    w: u32,
    conn: Option<Conn>,
    report: Report,
    ledger_seq: u64,
}

impl Worker {
    fn new(target: Arc<dyn Target>, settings: Settings, w: u32) -> Self {
        Self { target, settings, w, conn: None, report: Report::default(), ledger_seq: 0 }
    }

    fn fail(&mut self, msg: String) {
        if self.report.failures.len() < 200 {
            self.report.failures.push(format!("worker {}: {msg}", self.w));
        }
    }

    fn ledger_target(&self) -> String {
        format!("/v1/stream/ledger/{}/w{}", self.settings.run, self.w)
    }

    async fn run(mut self, share: usize) -> Report {
        let names = Names { worker: self.w };
        let mut setup = gen::setup_requests(&names);
        setup.push(Req::new("PUT", self.ledger_target()).header("content-type", "application/octet-stream").bytes());
        for bytes in setup {
            match self.send(&bytes, After::Read, false).await {
                Outcome::Response(r) if r.status == 201 => {}
                other => self.fail(format!("setup {:?}: {other:?}", String::from_utf8_lossy(&bytes[..40]))),
            }
        }
        let mut generator = Generator::new(names, self.settings.seed);
        for i in 0..share {
            let case = generator.next_case();
            self.try_case(&case).await;
            if (i + 1) % self.settings.ledger_every == 0 {
                self.ledger_append().await;
            }
        }
        self.verify_ledger().await;
        self.report.ledger.insert(self.w, self.ledger_seq);
        self.report
    }

    /// Send on the open connection (opening one if needed); a connection
    /// that did not end in a reusable response is dropped.
    async fn send(&mut self, bytes: &[u8], after: After, head: bool) -> Outcome {
        if self.conn.is_none() {
            match Conn::open(&*self.target).await {
                Ok(c) => self.conn = Some(c),
                Err(e) => return Outcome::Closed(format!("connect: {e}")),
            }
        }
        let Some(conn) = self.conn.as_mut() else { return Outcome::Closed("no connection".into()) };
        let outcome = conn.exchange(bytes, after, head, self.settings.deadline).await;
        let reusable = matches!(&outcome, Outcome::Response(r) if !r.closes()) && after == After::Read;
        if !reusable {
            self.conn = None;
        }
        outcome
    }

    async fn try_case(&mut self, case: &Case) {
        self.report.tried += 1;
        let reused = self.conn.as_ref().is_some_and(|c| c.used > 0);
        let mut outcome = self.send(&case.bytes, case.after, case.head).await;
        if reused && case.must_answer && matches!(outcome, Outcome::Closed(_)) {
            // A keep-alive connection may close (idle timeout) just as a
            // request is sent; clients retry such a request once.
            outcome = self.send(&case.bytes, case.after, case.head).await;
        }
        let counts = self.report.by_kind.entry(case.kind).or_default();
        counts.tried += 1;
        let shown = String::from_utf8_lossy(&case.bytes[..case.bytes.len().min(160)]).into_owned();
        match outcome {
            Outcome::Hung => {
                counts.hung += 1;
                self.report.hung += 1;
                self.fail(format!("HUNG ({} {:?}): {shown:?}", case.kind, case.after));
            }
            Outcome::Closed(why) => {
                counts.closed += 1;
                if case.must_answer {
                    self.report.closed_unanswered += 1;
                    self.fail(format!("closed without a response ({}: {why}): {shown:?}", case.kind));
                }
            }
            Outcome::Response(resp) => {
                *counts.status.entry(resp.status).or_default() += 1;
                self.judge(case, &resp, &shown).await;
            }
        }
        if case.ambiguous_head() {
            // Bytes of the case may still wait on the connection as a next
            // request (see `Case::ambiguous_head`): a later request on it
            // would be judged by an answer to the leftovers.
            self.conn = None;
        }
    }

    async fn judge(&mut self, case: &Case, resp: &Response, shown: &str) {
        if resp.status == 501 && case.reserved {
            self.report.reserved_501 += 1;
        } else if resp.status >= 500 {
            self.report.server_errors += 1;
            let body = String::from_utf8_lossy(&resp.body[..resp.body.len().min(300)]).into_owned();
            self.fail(format!("{} ({}): {shown:?} -> {body:?}", resp.status, case.kind));
        }
        if case.traversal && (200..300).contains(&resp.status) {
            self.fail(format!("traversal accepted with {}: {shown:?}", resp.status));
        }
        if case.must_close && !resp.closes() {
            // No announcement: the server must still close right after.
            let closed = match self.conn.as_mut() {
                Some(conn) => conn.closed_within(Duration::from_secs(2)).await,
                None => true,
            };
            self.conn = None;
            if !closed {
                self.fail(format!("connection kept open after a CL+TE request: {shown:?}"));
            }
        }
    }

    /// Append the next ledger record (idempotent producer), retrying on new
    /// connections until acknowledged.
    async fn ledger_append(&mut self) {
        let seq = self.ledger_seq;
        let body = ledger_payload(self.w, seq);
        let req = Req::new("POST", self.ledger_target())
            .header("content-type", "application/octet-stream")
            .header("producer-id", format!("ledger-{}", self.w))
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string())
            .body(gen::Body::Sized(body.clone()))
            .bytes();
        for attempt in 0..5 {
            match self.send(&req, After::Read, false).await {
                Outcome::Response(r) if matches!(r.status, 200 | 204) => {
                    let echoed = r.header("producer-seq") == Some(seq.to_string().as_str());
                    if !echoed || (r.status == 204 && attempt == 0) {
                        self.fail(format!(
                            "ledger seq {seq}: answer {} with producer-seq {:?}",
                            r.status,
                            r.header("producer-seq")
                        ));
                    }
                    self.ledger_seq += 1;
                    self.report.ledger_acked += 1;
                    self.report.ledger_bytes += body.len() as u64;
                    return;
                }
                Outcome::Response(r) => {
                    self.fail(format!("ledger seq {seq}: status {} {:?}", r.status, String::from_utf8_lossy(&r.body)));
                    return;
                }
                other => {
                    if attempt == 4 {
                        self.fail(format!("ledger seq {seq}: never acknowledged: {other:?}"));
                    }
                    self.conn = None;
                }
            }
        }
    }

    /// The ledger holds exactly the acknowledged appends, in order.
    async fn verify_ledger(&mut self) {
        let want = ledger_content(self.w, self.ledger_seq);
        match read_stream(&*self.target, &self.ledger_target(), self.settings.deadline).await {
            Ok(got) if got == want => {}
            Ok(got) => {
                let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
                self.fail(format!(
                    "ledger holds {} bytes, {} acknowledged; first difference at byte {at}",
                    got.len(),
                    want.len()
                ));
            }
            Err(e) => self.fail(format!("reading the ledger: {e:#}")),
        }
    }
}

/// The whole content of the stream at `target` (catch-up reads until up to date).
pub async fn read_stream(target: &dyn Target, path: &str, deadline: Duration) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut offset = "-1".to_owned();
    for _ in 0..100_000 {
        let mut conn = Conn::open(target).await?;
        let req = Req::new("GET", format!("{path}?offset={offset}")).bytes();
        let resp = match conn.exchange(&req, After::Read, false, deadline).await {
            Outcome::Response(r) if r.status == 200 => r,
            other => anyhow::bail!("GET {path}?offset={offset}: {other:?}"),
        };
        out.extend_from_slice(&resp.body);
        let next = resp.header("stream-next-offset").map(str::to_owned);
        let Some(next) = next else { anyhow::bail!("no Stream-Next-Offset") };
        if resp.header("stream-up-to-date") == Some("true") {
            return Ok(out);
        }
        offset = next;
    }
    anyhow::bail!("{path}: never up to date")
}
