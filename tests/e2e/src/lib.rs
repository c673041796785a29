//! End-to-end test support for the `durable-streams` server binary.
//!
//! - [`server`]: locate (or build once) the binary, run it on a free
//!   127.0.0.1 port with a temp data dir, wait until it answers, stop it with
//!   `SIGKILL` or `SIGTERM`, and always kill it on drop.
//! - [`raw`]: a tiny HTTP/1.1 client that sends a request target verbatim
//!   (reqwest normalises `..` and `%2e%2e` away, which would hide traversal
//!   attempts from the server).
//! - [`record`]: self-delimiting, checksummed batch records for the crash
//!   test, and a parser that detects torn, foreign or corrupted bytes.
//! - [`checks`]: expected statuses, all failures reported together.
//! - [`read_all`] and friends: protocol helpers shared by the tests.

pub mod checks;
pub mod raw;
pub mod record;
pub mod server;

use std::time::Duration;

use anyhow::{bail, Context};
pub use checks::Checks;
pub use server::{Server, ServerOpts, Store};

/// A reqwest client for 127.0.0.1 only: never a proxy, bounded timeouts.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("building the reqwest client")
}

/// A response header as text, if present and valid.
pub fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// The whole stream content: `GET ?offset=-1`, then follow
/// `Stream-Next-Offset` until `Stream-Up-To-Date: true`. Returns the bytes
/// and the final next offset.
pub async fn read_all(client: &reqwest::Client, url: &str) -> anyhow::Result<(Vec<u8>, String)> {
    let mut offset = "-1".to_owned();
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let resp = client.get(format!("{url}?offset={offset}")).send().await.context("GET")?;
        let status = resp.status().as_u16();
        let next = header(&resp, "stream-next-offset");
        let up_to_date = header(&resp, "stream-up-to-date").as_deref() == Some("true");
        let body = resp.bytes().await.context("reading the GET body")?;
        if status != 200 {
            bail!("GET {url}?offset={offset}: status {status}, body {:?}", String::from_utf8_lossy(&body));
        }
        let Some(next) = next else { bail!("GET {url}?offset={offset}: no Stream-Next-Offset") };
        if body.is_empty() && !up_to_date {
            bail!("GET {url}?offset={offset}: empty body but not up to date (would loop forever)");
        }
        out.extend_from_slice(&body);
        offset = next;
        if up_to_date {
            return Ok((out, offset));
        }
    }
    bail!("GET {url}: never reached Stream-Up-To-Date")
}
