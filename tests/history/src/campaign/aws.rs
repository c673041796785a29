//! The AWS store under faults: two `serve --store aws` servers on one
//! private emulator (clients pick either at random for every operation),
//! with faults injected at the emulator or on the network between the
//! servers and the emulator.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ds_e2e::{Emulator, Server, ServerOpts, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{clients_done, conclude, idle, with_faults, Report, Scale};
use crate::client::{Servers, Shared};
use crate::proxy::{FaultProxy, Mode};
use crate::workload::{Settings, Streams};

/// Chunks above this many bytes go to S3, so S3 faults hit appends too.
pub const INLINE_THRESHOLD: &str = "512";

fn settings(scale: &Scale, prefix: &str) -> Settings {
    Settings {
        clients: scale.clients,
        ops: scale.ops,
        slots: 4,
        rotate_after: 60,
        prefix: prefix.into(),
        seed: scale.seed,
    }
}

/// A private emulator with S3 taking chunks above [`INLINE_THRESHOLD`].
pub fn emulator() -> anyhow::Result<Emulator> {
    emulator_with(&[])
}

/// [`emulator`] with settings of the emulator's own (`AWS_EMULATOR_*`).
pub fn emulator_with(settings: &[(&str, &str)]) -> anyhow::Result<Emulator> {
    let mut emulator =
        Emulator::start_with(settings).map_err(|why| anyhow::anyhow!("the AWS emulator did not start: {why}"))?;
    emulator.env.push(("DS_AWS_INLINE_THRESHOLD".into(), INLINE_THRESHOLD.into()));
    Ok(emulator)
}

/// `env` with the AWS endpoint replaced.
pub fn via(env: &[(String, String)], endpoint: &str) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| (k.clone(), if k == "AWS_ENDPOINT_URL" { endpoint.to_owned() } else { v.clone() }))
        .collect()
}

async fn servers(env: Vec<(String, String)>) -> anyhow::Result<Vec<Server>> {
    let opts = ServerOpts {
        store: Store::Aws,
        env,
        extra_args: vec!["--max-read-bytes".into(), "8192".into()],
        ..ServerOpts::default()
    };
    Ok(vec![Server::start(opts.clone()).await?, Server::start(opts).await?])
}

fn route(servers: &[Server]) -> Arc<Servers> {
    Arc::new(Servers(servers.iter().map(|s| s.base.clone()).collect()))
}

/// The fault rules of a campaign: a share `rate` of DynamoDB and S3 calls
/// throttled, failed, applied then failed, or slowed.
pub fn rules(rate: f64, seed: u64) -> serde_json::Value {
    serde_json::json!({"rules": [
        {"service": "dynamodb", "fault": ["throttle", "error", "apply_then_error", "slow"], "rate": rate,
         "delay_ms": 200, "seed": seed},
        {"service": "s3", "fault": ["throttle", "error", "apply_then_error", "slow"], "rate": rate,
         "delay_ms": 200, "seed": seed + 1},
    ]})
}

/// Sum the emulator's `injected` counts (service → operation → fault → n)
/// by fault kind.
pub fn by_kind(injected: &serde_json::Value) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for ops in injected.as_object().into_iter().flat_map(|s| s.values()) {
        for faults in ops.as_object().into_iter().flat_map(|o| o.values()) {
            for (kind, n) in faults.as_object().into_iter().flatten() {
                *out.entry(format!("AWS {kind}")).or_default() += n.as_u64().unwrap_or(0);
            }
        }
    }
    out
}

/// Injected AWS faults: `rate` of the DynamoDB and S3 calls of both servers.
pub async fn faults(scale: &Scale, rate: f64) -> anyhow::Result<Report> {
    let started = Instant::now();
    let emulator = emulator()?;
    let mut servers = servers(emulator.env.clone()).await?;
    let route = route(&servers);
    let shared = Arc::new(Shared::new(route.clone(), Duration::from_secs(15)));
    emulator.faults(reqwest::Method::POST, Some(rules(rate, scale.seed))).await;
    let mut injected = serde_json::Value::Null;
    with_faults(&shared, settings(scale, "awsf"), |streams: Arc<Streams>| {
        let (shared, emulator, injected) = (&shared, &emulator, &mut injected);
        async move {
            while !idle(shared, &streams, scale.ops, Duration::from_secs(1)).await {}
            *injected = emulator.faults(reqwest::Method::DELETE, None).await;
            Ok(())
        }
    })
    .await?;
    let mut report = Report {
        name: "aws-faults".into(),
        setup: format!(
            "two `serve --store aws` servers on a private emulator (inline threshold {INLINE_THRESHOLD} bytes), \
             {:.0}% of DynamoDB and S3 calls faulted (throttle, error, apply_then_error, slow 200 ms); {} clients",
            rate * 100.0,
            scale.clients
        ),
        faults: by_kind(&injected["injected"]),
        ..Report::default()
    };
    conclude(&mut report, &shared, route.as_ref(), started).await;
    for server in &mut servers {
        assert_alive(server, &mut report);
    }
    Ok(report)
}

/// Network faults between both servers and the emulator, through the
/// fault proxy: delays, dropped and reset connections, blackholes and
/// answers cut after the request was applied, one episode after another.
pub async fn network(scale: &Scale) -> anyhow::Result<Report> {
    let started = Instant::now();
    let emulator = emulator()?;
    let upstream: SocketAddr = ([127, 0, 0, 1], emulator.port()).into();
    let proxy = FaultProxy::start(upstream).await?;
    let mut servers = servers(via(&emulator.env, &proxy.url())).await?;
    let route = route(&servers);
    let shared = Arc::new(Shared::new(route.clone(), Duration::from_secs(15)));
    let mut rng = StdRng::seed_from_u64(scale.seed);
    with_faults(&shared, settings(scale, "net"), |streams: Arc<Streams>| {
        let (shared, proxy, rng) = (&shared, &proxy, &mut rng);
        async move {
            while !chaos_episode(proxy, rng, &|| clients_done(shared, &streams, scale.ops)).await {}
            proxy.set(Mode::Pass);
            Ok(())
        }
    })
    .await?;
    // Connections the servers still hold through the proxy settle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut report = Report {
        name: "network".into(),
        setup: format!(
            "two `serve --store aws` servers reaching the emulator through the fault proxy: 0.3-1.5 s of clean \
             traffic, then 0.2-2 s of one fault (delay 20-200 ms per chunk, drop new connections, reset all, \
             blackhole, answers cut by a reset or a close), again and again; {} clients",
            scale.clients
        ),
        faults: proxy.counts(),
        ..Report::default()
    };
    conclude(&mut report, &shared, route.as_ref(), started).await;
    for server in &mut servers {
        assert_alive(server, &mut report);
    }
    Ok(report)
}

/// One round of clean traffic then one fault; true when `done` says the
/// clients finished.
pub async fn chaos_episode(proxy: &FaultProxy, rng: &mut StdRng, done: &(dyn Fn() -> bool + Sync)) -> bool {
    let hold = |rng: &mut StdRng, lo: u64, hi: u64| Duration::from_millis(rng.gen_range(lo..hi));
    let clean = hold(rng, 300, 1500);
    let (mode, lasting) = match rng.gen_range(0..6) {
        0 => (Mode::Delay(hold(rng, 20, 200)), hold(rng, 500, 2000)),
        1 => (Mode::Drop, hold(rng, 200, 1000)),
        2 => (Mode::Reset, hold(rng, 50, 300)),
        3 => (Mode::Blackhole, hold(rng, 300, 2000)),
        4 => (Mode::CutAnswers, hold(rng, 200, 1000)),
        _ => (Mode::CloseAnswers, hold(rng, 200, 1000)),
    };
    for (m, d) in [(Mode::Pass, clean), (mode, lasting)] {
        proxy.set(m);
        let until = Instant::now() + d;
        while Instant::now() < until {
            if done() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    proxy.set(Mode::Pass);
    done()
}

/// A server that died or stopped answering is a finding too.
fn assert_alive(server: &mut Server, report: &mut Report) {
    if !server.is_running() {
        report.violations += 1;
        report.findings.push(format!("server {} died:\n{}", server.base, server.log_tail()));
    }
}
