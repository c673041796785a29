//! The source events: writers append JSON batches of orders (1 to 10
//! events, `order/placed` or `order/shipped`, each with an id of its own)
//! through the HTTP servers, as idempotent producers that retry a batch with
//! the same (epoch, seq) until it is answered.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::client::{Route, Servers};

/// One batch a writer sent, and whether it was acknowledged.
#[derive(Debug, Clone)]
pub struct Written {
    pub path: String,
    pub ids: Vec<String>,
    pub acked: bool,
}

/// Append batches to `paths` until `budget` events were sent.
pub async fn writer(
    w: u32,
    servers: Arc<Servers>,
    paths: Vec<String>,
    budget: Arc<AtomicU64>,
    total: u64,
    seed: u64,
) -> Vec<Written> {
    let http = ds_e2e::client();
    let mut rng = StdRng::seed_from_u64(seed ^ u64::from(w));
    let mut seqs = vec![0u64; paths.len()];
    // A batch left unanswered is never retried: the producer goes on under
    // a new id, so its sequence has no hole.
    let mut generation = 0u32;
    let mut out = Vec::new();
    let mut n = 0u64;
    loop {
        let k = rng.gen_range(1..=10u64);
        if budget.fetch_add(k, SeqCst) >= total {
            return out;
        }
        let s = rng.gen_range(0..paths.len());
        let ids: Vec<String> = (0..k).map(|i| format!("w{w}-{n}-{i}")).collect();
        n += 1;
        let events: Vec<serde_json::Value> = ids
            .iter()
            .map(|id| {
                let kind = if rng.gen_bool(0.6) { "order/placed" } else { "order/shipped" };
                serde_json::json!({ "type": kind, "payload": { "id": id } })
            })
            .collect();
        let body = serde_json::to_vec(&events).expect("JSON");
        let started = Instant::now();
        let mut acked = false;
        let mut attempt = 0u64;
        while started.elapsed() < Duration::from_secs(60) {
            let sent = http
                .post(format!("{}/v1/stream/{}", servers.base(), paths[s]))
                .header("content-type", "application/json")
                .header("producer-id", format!("writer-{w}-{generation}"))
                .header("producer-epoch", "0")
                .header("producer-seq", seqs[s].to_string())
                .body(body.clone())
                .send()
                .await;
            match sent.map(|r| r.status().as_u16()) {
                Ok(200 | 204) => {
                    acked = true;
                    break;
                }
                Ok(s) if s < 500 => break, // refused: the final check finds what it means
                _ => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(20 * attempt.min(25))).await;
                }
            }
        }
        if acked {
            seqs[s] += 1;
        } else {
            generation += 1;
            seqs.iter_mut().for_each(|q| *q = 0);
        }
        out.push(Written { path: paths[s].clone(), ids, acked });
    }
}
