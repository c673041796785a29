//! The local store under process and storage faults.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use ds_e2e::tmpfs::Tmpfs;
use ds_e2e::{Server, ServerOpts};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{conclude, idle, with_faults, Report, Scale};
use crate::client::{Restarting, Shared};
use crate::workload::{Settings, Streams};

/// Read responses are cut at this size, so reads that end inside a record
/// are part of every history.
const MAX_READ: &str = "8192";

fn settings(scale: &Scale, prefix: &str) -> Settings {
    Settings {
        clients: scale.clients,
        ops: scale.ops,
        slots: 4,
        rotate_after: 150,
        prefix: prefix.into(),
        seed: scale.seed,
    }
}

fn opts(data_dir: std::path::PathBuf) -> ServerOpts {
    ServerOpts {
        data_dir: Some(data_dir),
        extra_args: vec!["--max-read-bytes".into(), MAX_READ.into()],
        ..ServerOpts::default()
    }
}

/// `kill -9` of the local-store server every `every` (on average) while
/// requests are in flight, restarted on the same data directory.
pub async fn kill9(scale: &Scale, every: Duration) -> anyhow::Result<Report> {
    let started = Instant::now();
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("data");
    let server = Server::start(opts(dir.clone())).await?;
    let route = Arc::new(Restarting::default());
    *route.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = server.base.clone();
    let shared = Arc::new(Shared::new(route.clone(), Duration::from_secs(10)));
    let mut kills = 0u64;
    let mut server = Some(server);
    let mut rng = StdRng::seed_from_u64(scale.seed);
    with_faults(&shared, settings(scale, "kill9"), |streams: Arc<Streams>| {
        let (shared, route, server, kills, rng, dir) = (&shared, &route, &mut server, &mut kills, &mut rng, &dir);
        async move {
            loop {
                if idle(shared, &streams, scale.ops, every.mul_f64(rng.gen_range(0.5..1.5))).await {
                    return Ok(());
                }
                // Kill with requests in flight (wait a little for some).
                let wait = Instant::now() + Duration::from_secs(1);
                while shared.in_flight.load(std::sync::atomic::Ordering::SeqCst) < 2 && Instant::now() < wait {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                server.as_mut().context("the server")?.kill9()?;
                *kills += 1;
                let restarted = Server::start(opts(dir.clone())).await.context("restarting after kill -9")?;
                *route.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = restarted.base.clone();
                *server = Some(restarted);
            }
        }
    })
    .await?;
    let mut report = Report {
        name: "local-kill9".into(),
        setup: format!(
            "`serve --store local --max-read-bytes {MAX_READ}`, killed with SIGKILL about every {every:?} while \
             requests were in flight and restarted on the same data directory; {} clients",
            scale.clients
        ),
        kills,
        ..Report::default()
    };
    report.faults.insert("kill -9".into(), kills);
    conclude(&mut report, &shared, route.as_ref(), started).await;
    Ok(report)
}

/// The local-store server on a tmpfs that is made full (shrunk to what is
/// in use) again and again, and grown again after a while.
pub async fn disk_full(scale: &Scale, every: Duration) -> anyhow::Result<Report> {
    let started = Instant::now();
    let fs = match Tmpfs::mount("64m") {
        Ok(fs) => fs,
        Err(why) => return Ok(Report::skipped("disk-full", why)),
    };
    let server = Server::start(opts(fs.path().join("data"))).await?;
    let route = Arc::new(Restarting::default());
    *route.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = server.base.clone();
    let shared = Arc::new(Shared::new(route.clone(), Duration::from_secs(10)));
    let mut episodes = 0u64;
    with_faults(&shared, settings(scale, "disk"), |streams: Arc<Streams>| {
        let (shared, fs, episodes) = (&shared, &fs, &mut episodes);
        async move {
            loop {
                if idle(shared, &streams, scale.ops, every).await {
                    return Ok(());
                }
                // Full: room for a few KiB more than what is in use.
                let used = fs.used().map_err(anyhow::Error::msg)?;
                fs.resize(&(used + 64 * 1024).to_string()).map_err(anyhow::Error::msg)?;
                *episodes += 1;
                let done = idle(shared, &streams, scale.ops, every).await;
                let used = fs.used().map_err(anyhow::Error::msg)?;
                fs.resize(&(used + 64 * 1024 * 1024).to_string()).map_err(anyhow::Error::msg)?;
                if done {
                    return Ok(());
                }
            }
        }
    })
    .await?;
    let mut report = Report {
        name: "disk-full".into(),
        setup: format!(
            "`serve --store local --max-read-bytes {MAX_READ}` on a tmpfs shrunk to 64 KiB above what is in use \
             (full) and grown by 64 MiB again, alternately every {every:?}; {} clients",
            scale.clients
        ),
        ..Report::default()
    };
    report.faults.insert("disk full".into(), episodes);
    conclude(&mut report, &shared, route.as_ref(), started).await;
    drop(server);
    Ok(report)
}
