//! The Lambda HTTP function's router (`functions/lambda-http`: the same
//! substrate, operator API over the on-demand operator, subscriptions with
//! `sole_writer` off) served over plain HTTP, so a bench can measure what
//! the function does per request without a Lambda runtime. One process
//! plays one warm execution environment serving requests concurrently.
//!
//!     ds-lambda-router --bind 127.0.0.1:PORT [--processors FILE]
//!
//! Configured like the function, from the environment (`AWS_ENDPOINT_URL`,
//! `DS_AWS_*`, `DS_LONG_POLL_TIMEOUT`, `DS_WEBHOOK_ALLOW_LOOPBACK`, ...);
//! `--processors FILE` sets `DS_PROCESSORS` (a file, as on every host). It binds
//! loopback addresses only.

use anyhow::{bail, Context};
use std::net::SocketAddr;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut bind: Option<SocketAddr> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bind" => bind = Some(args.next().context("--bind needs an address")?.parse()?),
            "--processors" => {
                let file = args.next().context("--processors needs a file")?;
                std::env::set_var("DS_PROCESSORS", file);
            }
            other => {
                bail!("unknown argument {other:?} (usage: ds-lambda-router --bind 127.0.0.1:PORT [--processors FILE])")
            }
        }
    }
    let bind = bind.context("--bind 127.0.0.1:PORT is required")?;
    if !bind.ip().is_loopback() {
        bail!("{bind} is not a loopback address: this bench harness serves 127.0.0.0/8 only");
    }
    // Kept while the process lives (span export, when OTEL_* asks for it).
    let _telemetry = lambda_http_fn::init_logs()?;
    let router = lambda_http_fn::router_from_env().await?;
    let listener = tokio::net::TcpListener::bind(bind).await.with_context(|| format!("binding {bind}"))?;
    axum::serve(listener, router).await?;
    Ok(())
}
