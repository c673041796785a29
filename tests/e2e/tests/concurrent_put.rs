//! Concurrent creates with an initial body against the local store: 200
//! rounds of 16 concurrent `PUT`s to distinct new streams (3,200 streams).
//! Every stream must then exist with exactly its body — right away, after a
//! `kill -9` and restart on the same data dir.
#![allow(clippy::unwrap_used)]

use futures::stream::{self, StreamExt};
use rand::{Rng, SeedableRng};

use ds_e2e::{client, header, read_all, Server, ServerOpts};

const ROUNDS: usize = 200;
const CONCURRENCY: usize = 16;

fn path(round: usize, i: usize) -> String {
    format!("cput/r{round:03}/s{i:02}")
}

fn body(round: usize, i: usize) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64((round * CONCURRENCY + i) as u64);
    let mut out = format!("stream {round}/{i}:").into_bytes();
    let len = rng.gen_range(1..4096);
    out.extend((0..len).map(|_| rng.gen::<u8>()));
    out
}

async fn verify_all(http: &reqwest::Client, server: &Server, when: &str) {
    let all: Vec<(usize, usize)> = (0..ROUNDS).flat_map(|r| (0..CONCURRENCY).map(move |i| (r, i))).collect();
    let problems: Vec<String> = stream::iter(all)
        .map(|(r, i)| async move {
            let url = server.url(&path(r, i));
            match read_all(http, &url).await {
                Ok((bytes, _)) if bytes == body(r, i) => None,
                Ok((bytes, _)) => Some(format!("{}: {} bytes, want {}", path(r, i), bytes.len(), body(r, i).len())),
                Err(e) => Some(format!("{}: {e:#}", path(r, i))),
            }
        })
        .buffer_unordered(CONCURRENCY)
        .filter_map(|p| async move { p })
        .collect()
        .await;
    assert!(
        problems.is_empty(),
        "{when}: {} of {} streams missing or wrong, e.g.:\n{}",
        problems.len(),
        ROUNDS * CONCURRENCY,
        problems.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_puts_keep_every_body() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let opts = ServerOpts { data_dir: Some(dir.clone()), ..ServerOpts::default() };
    let mut server = Server::start(opts.clone()).await.unwrap();
    let http = client();

    for round in 0..ROUNDS {
        let puts = (0..CONCURRENCY).map(|i| {
            let (http, url) = (&http, server.url(&path(round, i)));
            async move {
                let resp = http
                    .put(&url)
                    .header("content-type", "application/octet-stream")
                    .body(body(round, i))
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                let next = header(&resp, "stream-next-offset");
                (i, status, next)
            }
        });
        for (i, status, next) in futures::future::join_all(puts).await {
            assert_eq!(status, 201, "PUT {} (round {round})", path(round, i));
            assert!(next.is_some(), "PUT {}: no Stream-Next-Offset", path(round, i));
        }
    }
    server.assert_answers().await;
    verify_all(&http, &server, "after the PUTs").await;

    server.kill9().unwrap();
    let server = Server::start(opts).await.unwrap();
    verify_all(&http, &server, "after kill -9 and restart").await;
}
