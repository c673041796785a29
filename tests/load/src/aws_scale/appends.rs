//! Appends at scale: W writers over P server processes on S streams, 100 B
//! records through the raw driver for a fixed time, every append timed;
//! the emulator's counts over the run give calls, capacity, conditional
//! failures and retries per acknowledged append; then every stream is read
//! back and must hold exactly the acknowledged records, each once, in each
//! writer's order.

use super::emulator::{Counts, Emulator};
use crate::aws_cost::Prices;
use crate::client::{Client, Target, BINARY};
use crate::raw::{self, Reply};
use crate::record::verify;
use crate::stats::percentile;
use crate::workloads::append::{load_threads, templates};
use anyhow::{bail, Result};
use std::time::Duration;

/// One row of the table: its shape and what it measured (or why not).
pub struct Row {
    pub processes: usize,
    pub writers: usize,
    pub streams: usize,
    pub result: Result<Figures, String>,
}

pub struct Figures {
    pub acked: u64,
    pub secs: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub counts: Counts,
}

impl Figures {
    pub fn rate(&self) -> f64 {
        self.acked as f64 / self.secs
    }

    fn per(&self, x: f64) -> f64 {
        if self.acked == 0 {
            f64::NAN
        } else {
            x / self.acked as f64
        }
    }

    pub fn calls_per_append(&self) -> f64 {
        self.per(self.counts.total() as f64)
    }

    pub fn wcu_per_append(&self) -> f64 {
        self.per(self.counts.wcu)
    }

    pub fn rcu_per_append(&self) -> f64 {
        self.per(self.counts.rcu)
    }

    pub fn condition_failures_per_append(&self) -> f64 {
        self.per(self.counts.condition_failures() as f64)
    }

    /// Commit attempts beyond one per acknowledged append.
    pub fn retries_per_append(&self) -> f64 {
        self.per(self.counts.ddb("TransactWriteItems").saturating_sub(self.acked) as f64)
    }

    /// TransactWriteItems the emulator served per second.
    pub fn transactions_per_s(&self) -> f64 {
        self.counts.ddb("TransactWriteItems") as f64 / self.secs
    }

    /// DynamoDB on-demand request units, priced (S3 is not used by 100 B appends).
    pub fn dollars_per_million(&self) -> f64 {
        self.wcu_per_append() * Prices::DDB_WRITE_PER_M + self.rcu_per_append() * Prices::DDB_READ_PER_M
    }
}

/// A 2xx carrying `Stream-Next-Offset`.
fn acknowledged(r: &Reply) -> Result<()> {
    if !(200..300).contains(&r.status) || !r.next_offset {
        bail!("append: HTTP {}{}", r.status, if r.next_offset { "" } else { " without Stream-Next-Offset" });
    }
    Ok(())
}

/// Runs one row against the first `processes` of `bases`.
pub async fn row(
    bases: &[String],
    emulator: &Emulator,
    tag: &str,
    (processes, writers, streams): (usize, usize, usize),
    duration: Duration,
) -> Result<Figures> {
    let first = Client::new(Target::new(&bases[0], "/v1/stream"))?;
    let names: Vec<String> = (0..streams).map(|s| format!("{tag}-{s}")).collect();
    for n in &names {
        first.create(n, BINARY, None).await?;
    }
    let addrs = bases[..processes].iter().map(|b| raw::socket_addr(b)).collect::<Result<Vec<_>>>()?;
    let host = addrs[0].to_string();
    let targets = templates(&host, "/v1/stream", tag, streams, writers)?
        .into_iter()
        .enumerate()
        .map(|(w, t)| (addrs[w % processes], t))
        .collect();
    emulator.take().await?;
    let run = raw::drive_each(targets, duration, load_threads(), acknowledged, true).await?;
    let counts = emulator.take().await?;
    for (s, name) in names.iter().enumerate() {
        let mine: Vec<u64> = run.acked.iter().skip(s).step_by(streams).copied().collect();
        let read = first.read_all(name).await?;
        verify(&read.body, &mine).map_err(|e| e.context(format!("stream {name}")))?;
    }
    Ok(Figures {
        acked: run.acked.iter().sum(),
        secs: run.elapsed.as_secs_f64(),
        p50_ms: percentile(&run.latencies_us, 50.0) / 1000.0,
        p99_ms: percentile(&run.latencies_us, 99.0) / 1000.0,
        counts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_append_figures() {
        let mut counts = Counts { wcu: 400.0, rcu: 10.0, ..Counts::default() };
        counts.calls.insert("dynamodb:TransactWriteItems".into(), 130);
        counts.calls.insert("dynamodb:GetItem".into(), 10);
        counts.codes.insert("dynamodb:TransactWriteItems:ConditionalCheckFailed".into(), 30);
        let f = Figures { acked: 100, secs: 2.0, p50_ms: 1.0, p99_ms: 2.0, counts };
        assert_eq!(f.rate(), 50.0);
        assert_eq!(f.calls_per_append(), 1.4);
        assert_eq!((f.wcu_per_append(), f.rcu_per_append()), (4.0, 0.1));
        assert_eq!((f.condition_failures_per_append(), f.retries_per_append()), (0.3, 0.3));
        assert!((f.dollars_per_million() - (4.0 * 0.625 + 0.1 * 0.125)).abs() < 1e-9);
        assert_eq!(f.transactions_per_s(), 65.0);
    }
}
