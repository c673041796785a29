//! Answers lost on the network between a `--store aws` server and AWS,
//! through the fault proxy, deterministically: the request reaches the
//! emulator and is applied, then the connection ends where the answer
//! should be, by a close (FIN) or a reset (RST). Whatever the append was
//! answered, the stream must stay readable and hold its bytes at most once.
//!
//! Found by the network campaign: a TransactWriteItems whose answer was
//! closed surfaced as the SDK's "connection closed before message
//! completed" (a dispatch failure that is neither I/O nor timeout), was
//! classified "rejected, not applied", and the commit's S3 objects were
//! discarded while its chunk items pointed at them: every later read of
//! the stream answered 503 "chunk object vanished".
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use ds_e2e::{client, read_all, Emulator, Server, ServerOpts, Store};
use ds_history::campaign::aws::{via, INLINE_THRESHOLD};
use ds_history::proxy::{FaultProxy, Mode};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_is_lost_keeps_the_stream_readable() {
    let Some(mut emulator) = Emulator::start_or_skip("lost-answer test") else { return };
    emulator.env.push(("DS_AWS_INLINE_THRESHOLD".into(), INLINE_THRESHOLD.into()));
    let upstream: SocketAddr = ([127, 0, 0, 1], emulator.port()).into();
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let opts = ServerOpts { store: Store::Aws, env: via(&emulator.env, &proxy.url()), ..ServerOpts::default() };
    let mut server = Server::start(opts).await.unwrap();
    let http = client();
    let url = server.url("lost/answers");
    let resp = http.put(&url).header("content-type", "application/octet-stream").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 201);

    proxy.only_requests_containing(Some("DynamoDB_20120810.TransactWriteItems"));
    let mut bodies = Vec::new();
    for (i, mode) in [Mode::CloseAnswers, Mode::CutAnswers].into_iter().enumerate() {
        // Above the inline threshold: the chunk lives in an S3 object.
        let body = vec![b'a' + i as u8; 2048];
        proxy.set(mode);
        let resp =
            http.post(&url).header("content-type", "application/octet-stream").body(body.clone()).send().await.unwrap();
        proxy.set(Mode::Pass);
        let status = resp.status().as_u16();
        eprintln!("{mode:?}: append answered {status}: {}", resp.text().await.unwrap_or_default());
        bodies.push(body);
    }
    let counts = proxy.counts();
    assert!(counts.get("answers closed").is_some_and(|n| *n > 0), "{counts:?}");
    assert!(counts.get("answers cut").is_some_and(|n| *n > 0), "{counts:?}");

    let (bytes, _) = read_all(&http, &url).await.unwrap_or_else(|e| panic!("the stream is unreadable: {e:#}"));
    // Each body was applied by its first attempt (the emulator saw it), so
    // it is there, once; nothing else is.
    assert_eq!(bytes, bodies.concat(), "each append exactly once");
    server.assert_answers().await;
}
