//! `durable-streams serve`: the protocol router over the chosen substrate.

mod aws;
mod aws_cmd;
mod cli;
mod client_cmd;
mod client_read;
mod client_write;
mod processors;
mod processors_cmd;
mod retention;
mod security;
mod stores;
mod subscriptions;
mod tls;
mod token_cmd;

use anyhow::Context;
use clap::Parser;
use cli::{Cli, Command, ServeArgs};
use ds_core::{ServiceConfig, StreamService};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let client = |cmd| client_cmd::run(cmd, &cli.conn);
    use client_cmd::ClientCommand as C;
    match cli.command {
        Command::Create(a) => client(C::Create(a)).await,
        Command::Write(a) => client(C::Write(*a)).await,
        Command::Read(a) => client(C::Read(a)).await,
        Command::Head(a) => client(C::Head(a)).await,
        Command::Fork(a) => client(C::Fork(a)).await,
        Command::Ls(a) => client(C::Ls(a)).await,
        Command::Close(a) => client(C::Close(a)).await,
        Command::Delete(a) => client(C::Delete(a)).await,
        _ if cli.conn != client_cmd::ConnArgs::default() => {
            anyhow::bail!("--url, --auth, --token and --ca-file before the command name are for the client commands")
        }
        Command::Serve(args) => {
            let _telemetry = init_logs(args.log_format)?;
            serve(*args).await
        }
        Command::Token(cmd) => token_cmd::run(cmd),
        Command::Processors(args) => processors_cmd::run(args).await,
        Command::Aws(args) => aws_cmd::run(*args).await,
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    // Everything that can refuse the configuration comes first: a refused
    // start leaves the data directory as it found it (no store files, no
    // webhook signing key).
    let access = args.security.access()?;
    args.security.check_bind(args.bind, access.auth.is_some())?;
    let tls = args.security.tls()?.map(|(cert, key)| tls::server_config(&cert, &key)).transpose()?;
    let cors = args.security.cors(access.auth.is_some())?;
    let processors = processors::load(args.processors.as_deref(), args.processors_toml.as_deref())?;
    retention::check(&args.retention)?;
    access.prefetch().await;
    let (mut substrate, expiry_due) = stores::open(&args).await?;
    let tap = ds_subscriptions::tap_hub(&mut substrate);
    let substrate = match &processors {
        Some(p) => p.tap(substrate),
        None => substrate,
    };
    let cfg = ServiceConfig {
        max_read_bytes: args.max_read_bytes,
        long_poll_timeout: args.long_poll_timeout,
        sse_max_duration: args.sse_max_duration,
        registry: args.registry,
        ..ServiceConfig::default()
    };
    let service = StreamService::new(substrate, cfg);
    if let Some(p) = &processors {
        p.bind_inline(&service);
    }
    if let Some(due) = expiry_due {
        let svc = service.clone();
        tokio::spawn(async move { svc.run_expiry_loop(due).await });
        // Expiry is also enforced on access, so a store that cannot list its
        // streams (e.g. a corrupt record) must not keep the server down.
        match service.rearm_expiries().await {
            Ok(armed) => tracing::info!(armed, "expiry alarms re-armed"),
            Err(e) => tracing::error!(error = %e, "re-arming expiry alarms failed; expiry stays enforced on access"),
        }
    }
    // Best effort: the first create makes it anyway.
    if let Err(e) = service.ensure_registry().await {
        tracing::warn!(error = %e, "could not create the __registry__ stream yet");
    }
    retention::start(&service, args.retention.clone(), args.retention_interval);
    let subscriptions = subscriptions::start(&args, &service, &tap).await?;
    if let Some(p) = &processors {
        p.start(&service).await?;
    }
    let ops = ds_http::Operations {
        cors,
        access: access.auth,
        rate_limits: access.budgets,
        metrics: Some(stores::prometheus(&service, processors.iter().map(|p| p.gauges()).collect())?),
        store_name: stores::name(args.store),
        https: tls.is_some(),
        subscriptions: Some(subscriptions),
        processors: processors.as_ref().map(|p| p.operator(&service)),
        public_url: None,
    };
    let http = ds_http::HttpConfig {
        max_body_bytes: args.max_body_bytes,
        max_live_readers: args.limits.max_live_readers,
        body_read_timeout: args.limits.body_read_timeout,
    };
    let app = ds_http::app_with(service.clone(), http, ops);
    let listener = tokio::net::TcpListener::bind(args.bind).await.with_context(|| format!("binding {}", args.bind))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(addr = %listener.local_addr()?, scheme, store = ?args.store, "serving Durable Streams at /v1/stream/");
    let shutdown = async move {
        shutdown_signal().await;
        tracing::info!("shutting down: finishing in-flight requests");
        service.begin_shutdown();
    };
    let limits = args.limits.conn_limits();
    match tls {
        Some(config) => ds_serve::serve_with(listener, app, limits, tls::Tls::new(config), shutdown).await,
        None => ds_serve::serve(listener, app, limits, shutdown).await,
    }
    if let Some(p) = processors {
        p.shutdown().await;
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { () = ctrl_c => {}, () = term => {} }
}

/// Logs to stderr, filter from `RUST_LOG`; and, when the `OTEL_*` variables
/// ask for it, span export beside them (`ds_telemetry`). Without them the
/// subscriber is exactly the plain one: no OpenTelemetry layer at all.
/// The returned exporter is kept until the server exits (its drop exports
/// the last spans).
fn init_logs(format: cli::LogFormat) -> anyhow::Result<Option<ds_telemetry::Telemetry>> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let Some(telemetry) = ds_telemetry::Telemetry::from_env("durable-streams")? else {
        let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
        if format == cli::LogFormat::Json {
            builder.json().init();
        } else {
            builder.init();
        }
        return Ok(None);
    };
    // Each layer filters for itself: the logs keep `RUST_LOG`, the export its own.
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = if format == cli::LogFormat::Json {
        logs.json().with_filter(filter).boxed()
    } else {
        logs.with_filter(filter).boxed()
    };
    tracing_subscriber::registry().with(logs).with(telemetry.layer()).init();
    Ok(Some(telemetry))
}
