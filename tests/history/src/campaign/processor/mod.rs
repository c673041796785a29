//! The AWS processor plane under faults: the processor function with the
//! built-in outbox and counter (configured as a deployment names them), fed
//! by the test pumps that play the table's DynamoDB Stream (the template's
//! filter, batch size, `ReportBatchItemFailures` and retry budget) and
//! EventBridge Scheduler, while:
//!
//! - writers append order batches through two `serve --store aws` servers;
//! - a share of the DynamoDB and S3 calls of everyone (servers, function,
//!   observer) is faulted at the emulator;
//! - the servers and the function reach AWS through the fault proxy, which
//!   delays, drops, resets, blackholes and cuts answers, episode after
//!   episode (the pumps, like Lambda's event source, are not faulted);
//! - invocations are killed a random moment into their batch and their
//!   instance replaced.
//!
//! An observer samples cursors against effects all along
//! ([`observe`]); after the writers stop, faults end, the plane drains and
//! the final check runs: every acknowledged source event relayed exactly
//! once, counters exact, cursors at the tails.

mod lambda;
mod observe;
mod writers;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use ds_e2e::{client, Server, ServerOpts, Store};
use ds_lambda_pump::{ProcessorEnv, SchedulePump, StreamPump};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::aws::{by_kind, chaos_episode, emulator_with, rules, via};
use super::Report;
use crate::client::Servers;
use crate::proxy::{FaultProxy, Mode};

/// The outbox's slug, its target, and the counter's slug.
pub const OUTBOX: &str = "accepted";
pub const TARGET: &str = "shop-accepted";
pub const COUNTER: &str = "shop-count";

/// The deployment's processors (the TOML of `DS_PROCESSORS_TOML`): the outbox
/// checkpoints every 100 events, as a deployment would on AWS (a kill then
/// replays up to 99 relays, which their idempotency keys must absorb); the
/// counter every event, so that path stays under the same faults.
const CONFIG: &str = r#"
[[processor]]
kind = "outbox"
slug = "accepted"
streams = "shop/*"
checkpoint = "every 100 events"
target = "shop-accepted"
create_target = true
consumes = ["order/placed"]
template = { type = "order/accepted", payload = { order = "$/payload/id", source = "$/stream" } }

[[processor]]
kind = "counter"
slug = "shop-count"
streams = "shop/*"
checkpoint = "every event"
group_by = "/type"
"#;

/// How big the campaign is and how hard the faults are.
#[derive(Debug, Clone)]
pub struct Settings {
    pub events: u64,
    pub writers: u32,
    pub streams: u32,
    /// Share of invocations killed mid-batch.
    pub kill_rate: f64,
    /// Share of DynamoDB and S3 calls faulted at the emulator.
    pub aws_rate: f64,
    pub seed: u64,
}

/// The drain after the faults, bounded by its progress rather than by a
/// fixed time (a correctness bound, not a speed one): however big the
/// backlog, the plane fails only when its lag stops shrinking.
struct Drain {
    started: Instant,
    next_look: Instant,
    /// The smallest lag seen, and when it was first that small.
    best: Option<(u64, Instant)>,
    /// Stream records delivered so far, and when that count last grew: at
    /// lag 0 the processors are level with every stream while the pump
    /// still delivers the records of appends they already processed, which
    /// is progress too.
    delivered: (u64, Instant),
}

/// Stream records the emulator keeps (seconds): far more than the pump ever
/// lags by (one invocation, at most its 30 s deadline).
const STREAM_RETENTION_S: &str = "600";

/// How often a long run says where it is (on stderr).
const STATUS_EVERY: Duration = Duration::from_secs(60);

/// How long the lag may stay where it was before the drain fails.
const STALL: Duration = Duration::from_secs(300);

impl Drain {
    fn new() -> Self {
        Self { started: Instant::now(), next_look: Instant::now(), best: None, delivered: (0, Instant::now()) }
    }

    /// Time to measure the lag again (every 10 s).
    fn due(&mut self) -> bool {
        let due = Instant::now() >= self.next_look;
        if due {
            self.next_look = Instant::now() + Duration::from_secs(10);
        }
        due
    }

    /// The finding when `lag` (bytes the processors are behind, `None`
    /// when it could not be read) has not shrunk and no further stream
    /// record was `delivered` (a running count) for [`STALL`].
    fn stalled(&mut self, lag: Option<u64>, delivered: u64) -> Option<String> {
        let now = Instant::now();
        match (lag, self.best) {
            (Some(lag), Some((best, _))) if lag < best => self.best = Some((lag, now)),
            (Some(lag), None) => self.best = Some((lag, now)),
            _ => {}
        }
        if delivered > self.delivered.0 {
            self.delivered = (delivered, now);
        }
        let lag_since = self.best.map_or(self.started, |(_, at)| at);
        let since = lag_since.max(self.delivered.1);
        (now.duration_since(since) > STALL).then(|| {
            format!(
                "the processors made no progress for {} s ({} s after the faults ended; lag {}; {} records delivered)",
                STALL.as_secs(),
                self.started.elapsed().as_secs(),
                self.best.map_or("never read".to_owned(), |(lag, _)| format!("{lag} bytes")),
                self.delivered.0
            )
        })
    }
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// Run the campaign (see the module docs).
pub async fn run(s: &Settings) -> anyhow::Result<Report> {
    let started = Instant::now();
    // The table's stream is read by the pump within seconds of each write;
    // trimming what is older than ten minutes keeps the emulator's memory
    // (and with it the time of its every call) from growing with the run.
    let emulator = emulator_with(&[("AWS_EMULATOR_STREAM_RETENTION_S", STREAM_RETENTION_S)])?;
    // The pumps and the per-test resources read the emulator's client
    // environment from the process, as the processor tests do.
    for (k, v) in &emulator.env {
        std::env::set_var(k, v);
    }
    let env = ProcessorEnv::new("history processor campaign").await.context("no emulator endpoint")?;
    let upstream: SocketAddr = ([127, 0, 0, 1], emulator.port()).into();
    let proxy = Arc::new(FaultProxy::start(upstream).await?);
    // The processor plane's calls go through the fault proxy; the
    // harness's own (the queues it pumps) go straight to the emulator.
    let mut faulted = env
        .with_conf(aws_config::defaults(aws_config::BehaviorVersion::latest()).endpoint_url(proxy.url()).load().await);
    faulted.sqs = env.sqs.clone();
    let mut server_env = via(&emulator.env, &proxy.url());
    server_env.extend([
        ("DS_AWS_TABLE".to_owned(), env.cfg.table.clone()),
        ("DS_AWS_BUCKET".to_owned(), env.cfg.bucket.clone()),
        ("DS_AWS_SCHEDULE_GROUP".to_owned(), env.cfg.schedule_group.clone()),
    ]);
    let opts = ServerOpts { store: Store::Aws, env: server_env, ..ServerOpts::default() };
    let servers = [Server::start(opts.clone()).await?, Server::start(opts).await?];
    let route = Arc::new(Servers(servers.iter().map(|s| s.base.clone()).collect()));
    let paths: Vec<String> = (0..s.streams).map(|i| format!("shop/{i}")).collect();
    for path in &paths {
        let resp = client()
            .put(format!("{}/v1/stream/{path}", servers[0].base))
            .header("content-type", "application/json")
            .send()
            .await?;
        anyhow::ensure!(resp.status().is_success(), "creating {path}: {}", resp.status());
    }

    let lambda = lambda::Lambda::new(&faulted, CONFIG, s.kill_rate, s.seed);
    let mut pump = StreamPump::new(&env).await;
    // Fired synchronously: a revival the faults or kills fail stays and is
    // fired again a second later. (Asynchronously, as Lambda would, it would
    // land on the failed-invocations queue after 3 attempts for an operator
    // to redrive: shared/processor-aws/tests/function/redrive.rs.)
    let schedules = SchedulePump::for_group(&env.conf, &env.revival_group);
    let observer = Arc::new(tokio::sync::Mutex::new(observe::Observer::new(env.service(), &paths)));
    emulator.faults(reqwest::Method::POST, Some(rules(s.aws_rate, s.seed))).await;
    let budget = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..s.writers)
        .map(|w| tokio::spawn(writers::writer(w, route.clone(), paths.clone(), budget.clone(), s.events, s.seed)))
        .collect();
    let stop_chaos = Arc::new(AtomicBool::new(false));
    let mut chaos = Some({
        let (proxy, stop, seed) = (Arc::clone(&proxy), Arc::clone(&stop_chaos), s.seed);
        tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            while !chaos_episode(&proxy, &mut rng, &|| stop.load(SeqCst)).await {}
            proxy.set(Mode::Pass);
        })
    });

    // Samples run beside the invocations, so they also see cursors and
    // effects in the middle of a batch.
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (observer, stop, paths, seed) = (Arc::clone(&observer), Arc::clone(&stop_sampling), paths.clone(), s.seed);
        tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            while !stop.load(SeqCst) {
                observer.lock().await.sample(&paths[rng.gen_range(0..paths.len())]).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let (mut delivered, mut failed_deliveries, mut revivals) = (0u64, 0u64, 0u64);
    let (mut backoff, mut next_fire) = (0u32, Instant::now());
    let mut drain: Option<(Drain, serde_json::Value)> = None;
    let mut under_faults = (0u64, 0u64);
    let mut violations = Vec::new();
    // While the writers write, and after until the plane has caught up once
    // (a minute at most), faults and kills go on; then they stop and the
    // plane drains.
    let mut settling: Option<Instant> = None;
    let mut next_status = Instant::now() + STATUS_EVERY;
    loop {
        let settled = match (drain.is_none(), writers.iter().all(|w| w.is_finished())) {
            (true, true) => {
                let since = *settling.get_or_insert_with(Instant::now);
                since.elapsed() > Duration::from_secs(60)
                    || (pump.pending().is_empty() && observer.lock().await.caught_up().await)
            }
            _ => false,
        };
        if settled {
            stop_chaos.store(true, SeqCst);
            if let Some(chaos) = chaos.take() {
                chaos.await.context("the chaos task")?;
            }
            lambda.stop_killing();
            let injected = emulator.faults(reqwest::Method::DELETE, None).await;
            drain = Some((Drain::new(), injected));
            under_faults = (started.elapsed().as_secs(), lambda.counts.total.load(SeqCst));
        }
        if drain.is_none() && Instant::now() >= next_status {
            next_status = Instant::now() + STATUS_EVERY;
            let written = budget.load(SeqCst);
            eprintln!(
                "processor campaign: under faults for {} s, {written} events written, {}, {delivered} records \
                 delivered, {} pending",
                started.elapsed().as_secs(),
                lambda.counts.timing(),
                pump.pending().len()
            );
        }
        let d = pump.deliver(&lambda, now_ms() + 30_000).await;
        delivered += d.delivered as u64;
        if d.failed.is_empty() {
            backoff = 0;
            if d.delivered == 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            // Lambda backs off before retrying a failed batch.
            failed_deliveries += 1;
            backoff = (backoff + 1).min(5);
            tokio::time::sleep(Duration::from_millis(50 << backoff)).await;
        }
        if Instant::now() >= next_fire {
            next_fire = Instant::now() + Duration::from_secs(1);
            let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
            revivals += schedules.fire_due(&lambda, now, now_ms() + 30_000).await as u64;
        }
        if let Some((progress, _)) = &mut drain {
            if pump.pending().is_empty() && observer.lock().await.caught_up().await {
                break;
            }
            if progress.due() {
                let lag = observer.lock().await.lag().await;
                if Instant::now() >= next_status {
                    next_status = Instant::now() + STATUS_EVERY;
                    eprintln!(
                        "processor campaign: draining for {} s, lag {lag:?} bytes, {}, {delivered} records delivered, \
                         {} pending",
                        progress.started.elapsed().as_secs(),
                        lambda.counts.timing(),
                        pump.pending().len()
                    );
                }
                if let Some(stalled) = progress.stalled(lag, delivered) {
                    violations.push(stalled);
                    break;
                }
            }
        }
    }
    let mut written = Vec::new();
    for w in writers {
        written.extend(w.await.context("a writer")?);
    }
    stop_sampling.store(true, SeqCst);
    sampler.await.context("the sampler")?;
    let mut observer = observer.lock().await;
    let (events, relays) = observer.finish(&written).await;
    violations.extend(observer.violations.iter().cloned());

    let drained_in = drain.as_ref().map_or(0, |(d, _)| d.started.elapsed().as_secs());
    let injected = drain.map(|(_, v)| v).unwrap_or_default();
    let mut report = Report {
        name: "processor".into(),
        setup: format!(
            "the processor function (built-in outbox and counter) through the stream and schedule pumps; {} writers \
             appending 1-10 order events per batch to {} streams through two `serve --store aws` servers; {:.0}% of \
             DynamoDB and S3 calls faulted at the emulator; servers and function behind the fault proxy; {:.0}% of \
             invocations killed 1-400 ms into their batch; the outbox checkpoints every 100 events, the counter every \
             event",
            s.writers,
            s.streams,
            s.aws_rate * 100.0,
            s.kill_rate * 100.0
        ),
        faults: by_kind(&injected["injected"]),
        kills: lambda.counts.killed.load(SeqCst),
        violations: violations.len(),
        findings: violations,
        ..Report::default()
    };
    report.faults.extend(proxy.counts());
    report.faults.insert("invocations killed mid-batch".into(), lambda.counts.killed.load(SeqCst));
    let c = &lambda.counts;
    for (k, v) in [
        ("processor events", events),
        ("relays", relays),
        ("appends acknowledged", written.iter().filter(|w| w.acked).count() as u64),
        ("appends unanswered", written.iter().filter(|w| !w.acked).count() as u64),
        ("stream records delivered", delivered),
        ("failed deliveries", failed_deliveries),
        ("invocations", c.total.load(SeqCst)),
        ("invocations under faults", under_faults.1),
        ("seconds under faults", under_faults.0),
        ("seconds to drain after the faults", drained_in),
        ("failed invocations", c.failed.load(SeqCst)),
        ("kills that came after the end", c.finished_before_kill.load(SeqCst)),
        ("cold starts", c.cold_starts.load(SeqCst)),
        ("revivals fired", revivals),
        ("cursor samples", observer.samples),
    ] {
        report.extra.insert(k.into(), v);
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain_level_since(ago: Duration, delivered: u64) -> Drain {
        let then = Instant::now().checked_sub(ago).expect("the machine has been up that long");
        Drain { started: then, next_look: then, best: Some((0, then)), delivered: (delivered, then) }
    }

    #[test]
    fn records_still_delivered_at_lag_zero_are_progress() {
        let mut drain = drain_level_since(STALL + Duration::from_secs(10), 100);
        assert_eq!(drain.stalled(Some(0), 150), None, "the pump delivered 50 more records");
        assert_eq!(drain.stalled(Some(0), 150), None, "and the stall clock restarted then");
    }

    #[test]
    fn neither_lag_nor_deliveries_moving_is_a_stall() {
        let mut drain = drain_level_since(STALL + Duration::from_secs(10), 100);
        let finding = drain.stalled(Some(0), 100).expect("a stall");
        assert!(finding.contains("no progress for 300 s") && finding.contains("100 records delivered"), "{finding}");
    }
}
