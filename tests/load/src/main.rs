//! ds-load CLI. `run` drives one already-running server once; `bench`
//! calibrates against the trivial server (`sink`), then spawns every server
//! of a servers file for several interleaved rounds and writes the markdown
//! report. Knobs also come from DS_BENCH_* environment variables
//! so `make bench` can be tuned without editing scripts.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use ds_load::bench::{self, Workloads};
use ds_load::calibrate;
use ds_load::server::{parse_servers, Class, ServerSpec};
use ds_load::workloads::{unique_tag, P1Body, Params};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "ds-load", about = "Load and correctness tool for Durable Streams servers")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run workloads once against a server that is already running.
    Run {
        /// Base URL, e.g. http://127.0.0.1:4437
        #[arg(long)]
        base: String,
        /// Path prefix of stream URLs ("/v1/stream"; "" for streams at /<name>).
        #[arg(long, default_value = "/v1/stream")]
        prefix: String,
        /// Comma-separated: p1,p2,p3,p4,p7 (p4 needs --pid).
        #[arg(long, default_value = "p1,p2,p3")]
        workloads: String,
        /// Server PID, for P4's resident-memory measurement.
        #[arg(long)]
        pid: Option<u32>,
        #[command(flatten)]
        knobs: Knobs,
    },
    /// AWS calls per operation of a server on `--store aws` (emulator counts).
    AwsCalls {
        #[arg(long)]
        base: String,
        #[arg(long, default_value = "/v1/stream")]
        prefix: String,
        /// The emulator's counting endpoint, e.g. $AWS_ENDPOINT_URL/_emulator/calls
        #[arg(long)]
        calls_url: String,
        /// Operations of each kind.
        #[arg(long, default_value_t = 100)]
        ops: usize,
    },
    /// The AWS emulator's own ceiling (DynamoDB calls/s with no modeled
    /// delay): the calibration line of every AWS bench report.
    AwsCeiling {
        /// The emulator, e.g. $AWS_ENDPOINT_URL
        #[arg(long, env = "AWS_ENDPOINT_URL")]
        endpoint: String,
        /// Connections (each on a partition key of its own).
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        #[arg(long, default_value_t = 2.0)]
        secs: f64,
    },
    /// AWS substrate at scale (bench/aws-scale.sh): our server's processes
    /// on `--store aws` over the emulator's latency and limit model.
    AwsScale(Box<AwsScaleArgs>),
    /// Processor effect latency: append acknowledged → the outbox's event
    /// readable on its target (a server running bench/processors.sh's outbox).
    ProcessorLatency {
        #[arg(long)]
        base: String,
        #[arg(long, default_value = "/v1/stream")]
        prefix: String,
        /// The stream appended to (the outbox's source).
        #[arg(long, default_value = "bench/source")]
        source: String,
        /// The outbox's target stream.
        #[arg(long, default_value = "bench-feed")]
        target: String,
        #[arg(long, default_value_t = 1000)]
        iterations: usize,
        /// Milliseconds between parking the reader and sending the append.
        #[arg(long, default_value_t = 2)]
        settle_ms: u64,
        /// The server's PID (excluded from the busy-machine figure).
        #[arg(long)]
        pid: Option<u32>,
    },
    /// Subscription webhook latency: append acknowledged → the webhook
    /// notification received by ds-load's own receiver (127.0.0.1, port 0).
    /// The server must allow loopback webhook URLs.
    WebhookLatency {
        #[arg(long)]
        base: String,
        #[arg(long, default_value = "/v1/stream")]
        prefix: String,
        /// The stream appended to (default: a new name per run).
        #[arg(long)]
        stream: Option<String>,
        /// The subscription's id (default: a new one per run; deleted at the end).
        #[arg(long)]
        subscription: Option<String>,
        #[arg(long, default_value_t = 1000)]
        iterations: usize,
        /// Milliseconds before each append: the previous wake's auto-ack
        /// commits meanwhile, so each sample is one wake from idle.
        #[arg(long, default_value_t = 5)]
        settle_ms: u64,
        /// The server's PID (its CPU per iteration; excluded from the busy-machine figure).
        #[arg(long)]
        pid: Option<u32>,
    },
    /// The trivial server the calibration measures against (reads each
    /// body, answers 204; answers a GET with `--read-bytes` bytes); runs
    /// until killed.
    Sink {
        #[arg(long, default_value = "127.0.0.1:0")]
        bind: String,
        #[arg(long, default_value_t = 1_000_000)]
        read_bytes: usize,
    },
    /// Only the calibration: ds-load's (and wrk's) ceiling against the sink.
    Calibrate {
        #[arg(long, env = "DS_BENCH_CALIBRATION_SECS", default_value_t = 2.0)]
        secs: f64,
        /// Concurrencies, comma-separated.
        #[arg(long, default_value = "1,16,64")]
        concurrency: String,
        /// Scratch directory (wrk's script).
        #[arg(long, default_value = "/tmp")]
        work_dir: PathBuf,
    },
    /// Lambda init time of a built bootstrap under a stand-in Runtime API;
    /// prints one markdown table row (see bench/lambda.sh).
    LambdaInit {
        /// Function name for the row.
        #[arg(long)]
        name: String,
        /// The deployment zip (its size is reported).
        #[arg(long)]
        zip: PathBuf,
        /// The unzipped `bootstrap` executable.
        #[arg(long)]
        bootstrap: PathBuf,
        #[arg(long, value_enum)]
        probe: ds_load::lambda::Probe,
        #[arg(long, env = "DS_BENCH_LAMBDA_RUNS", default_value_t = 10)]
        runs: usize,
        /// The function's stdout/stderr, appended.
        #[arg(long)]
        log: PathBuf,
    },
    /// AWS cost per operation: starts ours on `--store aws` behind a
    /// metering proxy to the emulator (`AWS_ENDPOINT_URL`) and prices what
    /// each operation used (`make aws-calls`).
    AwsCost {
        /// Our server's command line; `{port}` is substituted.
        #[arg(long)]
        server: String,
        /// Repetitions of each short operation.
        #[arg(long, default_value_t = 20)]
        ops: usize,
        /// Seconds the idle long-poll reader is watched (scaled to a minute).
        #[arg(long, env = "DS_AWS_COST_IDLE_SECS", default_value_t = 60.0)]
        idle_secs: f64,
        /// Lambda memory size the held time is priced at (template.yaml).
        #[arg(long, default_value_t = 512.0)]
        memory_mb: f64,
        #[arg(long, default_value = "/tmp")]
        work_dir: PathBuf,
    },
    /// Spawn each server of a servers file, round after round, and report.
    Bench {
        /// Tab-separated servers file (see server::parse_servers).
        #[arg(long)]
        servers: PathBuf,
        #[arg(long, env = "DS_BENCH_ROUNDS", default_value_t = 3)]
        rounds: usize,
        /// Comma-separated: p1,p2,p3,p4,p6,p7.
        #[arg(long, env = "DS_BENCH_WORKLOADS", default_value = "p1,p2,p3,p4,p6,p7")]
        workloads: String,
        /// Only these servers (comma-separated names); default all.
        #[arg(long, env = "DS_BENCH_ONLY")]
        only: Option<String>,
        /// Where server logs and data directories go.
        #[arg(long)]
        work_dir: PathBuf,
        /// Markdown written before the tables (title, machine, versions).
        #[arg(long)]
        preamble: Option<PathBuf>,
        /// Also write the report here (it is always printed).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Seconds per calibration point; 0 skips the calibration.
        #[arg(long, env = "DS_BENCH_CALIBRATION_SECS", default_value_t = 2.0)]
        calibration_secs: f64,
        #[command(flatten)]
        knobs: Knobs,
    },
}

#[derive(Args)]
struct AwsScaleArgs {
    /// Our server's command line; `{port}` is substituted.
    #[arg(long)]
    server: String,
    /// The Lambda router's command line (`{port}`, `{processors}` substituted): the listing section.
    #[arg(long)]
    router: Option<String>,
    /// The emulator's endpoint.
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    emulator: String,
    /// Comma-separated: listing, appends, readers (run in that order).
    #[arg(long, default_value = "listing,appends,readers")]
    sections: String,
    /// Append rows, processes x writers x streams.
    #[arg(long, default_value = "1x1x1,1x16x1,2x16x1,4x16x1,1x64x1,2x64x1,4x64x1,1x64x64")]
    append_rows: String,
    #[arg(long, default_value_t = 6.0)]
    append_secs: f64,
    #[arg(long, default_value = "long-poll,sse")]
    reader_modes: String,
    #[arg(long, default_value = "1,100,1000")]
    reader_counts: String,
    #[arg(long, default_value = "1,4")]
    reader_processes: String,
    /// Seconds the readers are watched while idle (the server's long-poll timeout is 20 s).
    #[arg(long, default_value_t = 30.0)]
    reader_window_secs: f64,
    /// Appends whose wake is timed.
    #[arg(long, default_value_t = 5)]
    wake_appends: usize,
    #[arg(long, default_value_t = 10_000)]
    list_streams: usize,
    #[arg(long, default_value_t = 10)]
    list_matches: usize,
    /// Seconds per calibration point (the emulator's ceiling, ds-load's); 0 skips.
    #[arg(long, default_value_t = 2.0)]
    calibration_secs: f64,
    /// Every modeled latency times this (1: AWS's figures). Above 1, rows
    /// whose calls would outrun the emulator's own ceiling at AWS's
    /// latencies can be measured against the same model's lone writer.
    #[arg(long, default_value_t = 1.0)]
    model_scale: f64,
    #[arg(long, default_value = "/tmp")]
    work_dir: PathBuf,
    #[arg(long, default_value = "The AWS substrate at scale, under the emulator's model of AWS")]
    title: String,
    /// Markdown put right after the title (machine, versions, command).
    #[arg(long)]
    preamble: Option<PathBuf>,
    /// Also write the report here.
    #[arg(long)]
    out: Option<PathBuf>,
}

impl AwsScaleArgs {
    fn params(&self) -> Result<ds_load::aws_scale::Params> {
        let list = |s: &str| -> Result<Vec<usize>> {
            s.split(',').filter(|x| !x.trim().is_empty()).map(|x| Ok(x.trim().parse()?)).collect()
        };
        Ok(ds_load::aws_scale::Params {
            server: self.server.clone(),
            router: self.router.clone(),
            emulator: self.emulator.clone(),
            sections: self.sections.split(',').map(|s| s.trim().to_string()).collect(),
            append_rows: ds_load::aws_scale::parse_rows(&self.append_rows)?,
            append_secs: self.append_secs,
            reader_modes: self
                .reader_modes
                .split(',')
                .map(ds_load::aws_scale::readers::Mode::parse)
                .collect::<Result<_>>()?,
            reader_counts: list(&self.reader_counts)?,
            reader_processes: list(&self.reader_processes)?,
            reader_window: Duration::from_secs_f64(self.reader_window_secs),
            wake_appends: self.wake_appends,
            list_streams: self.list_streams,
            list_matches: self.list_matches,
            calibration_secs: self.calibration_secs,
            model_scale: match self.model_scale {
                s if s.is_finite() && s > 0.0 => s,
                s => anyhow::bail!("--model-scale must be a positive number, not {s}"),
            },
            work_dir: self.work_dir.clone(),
            title: self.title.clone(),
            preamble: match &self.preamble {
                Some(f) => std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
                None => String::new(),
            },
        })
    }
}

#[derive(Args)]
struct Knobs {
    /// P1 and P7: seconds per append (create) run.
    #[arg(long, env = "DS_BENCH_P1_SECS", default_value_t = 3.0)]
    p1_secs: f64,
    /// P1: writers in the concurrent runs (and streams in the many-streams run).
    #[arg(long, env = "DS_BENCH_P1_CONCURRENCY", default_value_t = 64)]
    p1_concurrency: usize,
    #[arg(long, env = "DS_BENCH_P2_RECORDS", default_value_t = 10_000)]
    p2_records: usize,
    #[arg(long, env = "DS_BENCH_P2_READS", default_value_t = 25)]
    p2_reads: usize,
    #[arg(long, env = "DS_BENCH_P3_ITERS", default_value_t = 1_000)]
    p3_iters: usize,
    /// P3: milliseconds between parking the reader and sending the append.
    #[arg(long, env = "DS_BENCH_P3_SETTLE_MS", default_value_t = 2)]
    p3_settle_ms: u64,
    #[arg(long, env = "DS_BENCH_P4_STREAMS", default_value_t = 10_000)]
    p4_streams: usize,
    /// P1: what each append carries: binary (100 B records), json-event (a
    /// 100 B JSON event on a JSON stream), json-invalid (the same event
    /// with qty 0, which bench/inline.sh's schema refuses: every append
    /// must be answered 400) or state-upsert (one State Protocol upsert
    /// with a 200 B value over --p1-state-keys keys; bench/compaction.py).
    #[arg(long, env = "DS_BENCH_P1_BODY", default_value = "binary", value_parser = P1Body::parse)]
    p1_body: P1Body,
    /// P1: put before every stream name, e.g. "orders/" for a processor
    /// bound to `orders/*`.
    #[arg(long, env = "DS_BENCH_P1_STREAM_PREFIX", default_value = "")]
    p1_stream_prefix: String,
    /// P1: keys of the state-upsert body (append n upserts row k<n mod keys>).
    #[arg(long, env = "DS_BENCH_P1_STATE_KEYS", default_value_t = ds_load::state_record::DEFAULT_KEYS)]
    p1_state_keys: u64,
}

impl Knobs {
    fn params(&self) -> Params {
        Params {
            p1_duration: Duration::from_secs_f64(self.p1_secs),
            p1_concurrency: self.p1_concurrency,
            p2_records: self.p2_records,
            p2_reads: self.p2_reads,
            p3_iterations: self.p3_iters,
            p3_settle: Duration::from_millis(self.p3_settle_ms),
            p4_streams: self.p4_streams,
            p1_body: self.p1_body.with_state_keys(self.p1_state_keys),
            p1_stream_prefix: self.p1_stream_prefix.clone(),
            tag: unique_tag(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "P1 {} s per run, concurrency {}, {} bodies; P2 {} records, median of {} full reads per round; \
             P3 {} wake-ups per reader kind per round, {} ms settle; P4 {} streams",
            self.p1_secs,
            self.p1_concurrency,
            self.p1_body.name(),
            self.p2_records,
            self.p2_reads,
            self.p3_iters,
            self.p3_settle_ms,
            self.p4_streams
        )
    }
}

fn parse_workloads(s: &str) -> Workloads {
    s.split(',').map(|w| w.trim().to_lowercase()).filter(|w| !w.is_empty()).collect()
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    // On Ctrl-C/SIGTERM the work future is dropped, which kills any server it
    // spawned (kill_on_drop), so no process outlives the tool.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let code = tokio::select! {
        r = dispatch(cli) => r?,
        _ = tokio::signal::ctrl_c() => { eprintln!("interrupted"); 130 }
        _ = term.recv() => { eprintln!("terminated"); 143 }
    };
    std::process::exit(code);
}

async fn dispatch(cli: Cli) -> Result<i32> {
    match cli.cmd {
        Cmd::Run { base, prefix, workloads, pid, knobs } => {
            let spec = ServerSpec {
                name: base.clone(),
                class: Class::Memory,
                ours: true,
                prefix: prefix.clone(),
                binary: None,
                command: String::new(),
            };
            let results =
                ds_load::bench::run_attached(&base, &prefix, pid, &knobs.params(), &parse_workloads(&workloads)).await;
            let md = ds_load::report::single(&results, &spec, &knobs.describe());
            println!("{md}");
            Ok(if results.any_failed(0) { 1 } else { 0 })
        }
        Cmd::AwsCalls { base, prefix, calls_url, ops } => {
            println!("{}", ds_load::aws::calls_per_op(&base, &prefix, &calls_url, ops).await?);
            Ok(0)
        }
        Cmd::AwsCeiling { endpoint, concurrency, secs } => {
            let threads = ds_load::workloads::append::load_threads();
            println!("{}", ds_load::aws_ceiling::measure(&endpoint, concurrency, secs, threads).await?.markdown());
            Ok(0)
        }
        Cmd::AwsScale(args) => {
            std::fs::create_dir_all(&args.work_dir)?;
            let md = ds_load::aws_scale::run(&args.params()?).await?;
            println!("{md}");
            if let Some(out) = &args.out {
                std::fs::write(out, &md).with_context(|| format!("writing {}", out.display()))?;
            }
            Ok(0)
        }
        Cmd::ProcessorLatency { base, prefix, source, target, iterations, settle_ms, pid } => {
            let client = ds_load::client::Client::new(ds_load::client::Target::new(&base, &prefix))?;
            let settle = Duration::from_millis(settle_ms);
            let latency = ds_load::processor::run(&client, &source, &target, iterations, settle, pid).await?;
            println!("{}", latency.markdown());
            Ok(0)
        }
        Cmd::WebhookLatency { base, prefix, stream, subscription, iterations, settle_ms, pid } => {
            let client = ds_load::client::Client::new(ds_load::client::Target::new(&base, &prefix))?;
            let tag = unique_tag();
            let params = ds_load::webhook::Params {
                stream: stream.unwrap_or_else(|| format!("bench/webhook-{tag}")),
                subscription: subscription.unwrap_or_else(|| format!("bench-{tag}")),
                iterations,
                settle: Duration::from_millis(settle_ms),
                server_pid: pid,
            };
            let latency = ds_load::webhook::run(&client, &params).await?;
            println!("{}", latency.markdown());
            Ok(0)
        }
        Cmd::Sink { bind, read_bytes } => {
            let listener = tokio::net::TcpListener::bind(&bind).await?;
            eprintln!("sink listening on {}", listener.local_addr()?);
            ds_load::sink::serve(listener, read_bytes).await?;
            Ok(0)
        }
        Cmd::Calibrate { secs, concurrency, work_dir } => {
            let cs: Vec<usize> = concurrency.split(',').filter_map(|c| c.trim().parse().ok()).collect();
            let threads = ds_load::workloads::append::load_threads();
            let read = calibrate::ReadShape::default();
            let cal = calibrate::run(&cs, secs, threads, read, &work_dir).await?;
            println!("{}", cal.markdown());
            Ok(0)
        }
        Cmd::LambdaInit { name, zip, bootstrap, probe, runs, log } => {
            let mb = |p: &PathBuf| std::fs::metadata(p).map(|m| m.len() as f64 / 1e6);
            let (zip_mb, bin_mb) = (mb(&zip)?, mb(&bootstrap)?);
            let times = ds_load::lambda::init_times(&bootstrap, probe, runs, &log).await?;
            let (min, max) = ds_load::stats::min_max(&times);
            println!(
                "| {name} | {zip_mb:.2} | {bin_mb:.2} | {:.1} | {min:.1}–{max:.1} | {} | answered correctly ({probe:?} probe) |",
                ds_load::stats::median(&times),
                times.len()
            );
            Ok(0)
        }
        Cmd::AwsCost { server, ops, idle_secs, memory_mb, work_dir } => {
            let proxy = ds_load::aws_meter::start_from_env().await?;
            let p = ds_load::aws_cost::CostParams { ops, idle: Duration::from_secs_f64(idle_secs), memory_mb };
            println!("{}", ds_load::aws_cost::run(&server, &proxy, &p, &work_dir).await?);
            Ok(0)
        }
        Cmd::Bench { servers, rounds, workloads, only, work_dir, preamble, out, calibration_secs, knobs } => {
            let text = std::fs::read_to_string(&servers).with_context(|| format!("reading {}", servers.display()))?;
            let mut specs = parse_servers(&text)?;
            if let Some(only) = only {
                let keep: Vec<&str> = only.split(',').map(str::trim).collect();
                specs.retain(|s| keep.contains(&s.name.as_str()));
            }
            anyhow::ensure!(!specs.is_empty(), "no servers to run");
            std::fs::create_dir_all(&work_dir)?;
            let wl = parse_workloads(&workloads);
            let params = knobs.params();
            let calibration = if calibration_secs > 0.0 {
                eprintln!("calibrating the load tool against the trivial server ...");
                let cs = [1, ds_load::workloads::create::CREATE_IN_FLIGHT, params.p1_concurrency];
                let threads = ds_load::workloads::append::load_threads();
                let read = calibrate::ReadShape {
                    bytes: params.p2_records * ds_load::record::RECORD_LEN,
                    reads: params.p2_reads,
                };
                Some(calibrate::run(&cs, calibration_secs, threads, read, &work_dir).await.context("calibration")?)
            } else {
                None
            };
            let results = bench::run(&specs, &params, rounds.max(1), &wl, &work_dir, calibration).await;
            let mut pre = match &preamble {
                Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
                None => "# Durable Streams benchmark\n".to_string(),
            };
            pre.push_str(&format!(
                "\nRounds: {rounds}, servers interleaved in each round ({}). Workloads: {workloads}. {}.\n",
                specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(" → "),
                knobs.describe()
            ));
            let mut md = ds_load::report::markdown(&results, &specs, &pre);
            // Other work on the machine skews results; say how busy it was.
            let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
            let load: Vec<&str> = load.split_whitespace().take(3).collect();
            md.push_str(&format!("\nLoad average (1, 5, 15 min) at the end of the run: {}.\n", load.join(", ")));
            println!("{md}");
            if let Some(out) = out {
                std::fs::write(&out, &md).with_context(|| format!("writing {}", out.display()))?;
                eprintln!("wrote {}", out.display());
            }
            let ours_failed = specs.iter().enumerate().any(|(i, s)| s.ours && results.any_failed(i));
            let peers_failed: Vec<&str> = specs
                .iter()
                .enumerate()
                .filter(|(i, s)| !s.ours && results.any_failed(*i))
                .map(|(_, s)| s.name.as_str())
                .collect();
            if !peers_failed.is_empty() {
                eprintln!("note: peers with failed measurements (shown as FAIL): {}", peers_failed.join(", "));
            }
            Ok(if ours_failed { 1 } else { 0 })
        }
    }
}
