//! Running the real `durable-streams` binary on 127.0.0.1.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use tempfile::TempDir;

/// How long a freshly spawned server may take to answer `/health`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The server binary: `$DS_SERVER_BIN` if set, else built once per test
/// process with `cargo build -p durable-streams` into the target dir
/// (`$CARGO_TARGET_DIR`, else the one this test binary was built in).
/// Concurrent builds from several test processes are serialised by cargo's
/// own build-directory lock.
pub fn server_bin() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BIN.get_or_init(|| locate_or_build().map_err(|e| format!("{e:#}"))) {
        Ok(bin) => bin.clone(),
        Err(e) => panic!("no server binary: {e}"),
    }
}

fn locate_or_build() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os("DS_SERVER_BIN") {
        let bin = PathBuf::from(bin);
        ensure!(bin.is_file(), "DS_SERVER_BIN={} is not a file", bin.display());
        return Ok(bin);
    }
    let root = workspace_root();
    let target = target_dir(&root);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "-p", "durable-streams"]).current_dir(&root).env("CARGO_TARGET_DIR", &target);
    // `cargo test` gives this process the test package's CARGO_PKG_NAME,
    // CARGO_MANIFEST_DIR, ...; build scripts that watch those (ring's does)
    // would be re-run, and everything above them rebuilt, whenever a test of
    // another package built the server. Build as from a plain shell.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let set_by_cargo_test = ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_CRATE_", "CARGO_BIN_", "CARGO_PRIMARY_"]
            .iter()
            .any(|p| name.starts_with(p))
            || name == "CARGO_TARGET_TMPDIR"
            || name == "OUT_DIR";
        if set_by_cargo_test {
            build.env_remove(name.as_ref());
        }
    }
    let out = build.stdin(Stdio::null()).output().context("running cargo build -p durable-streams")?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        bail!("cargo build -p durable-streams failed ({}):\n{}", out.status, tail(&stderr, 6000));
    }
    let bin = target.join("debug").join(format!("durable-streams{}", std::env::consts::EXE_SUFFIX));
    ensure!(bin.is_file(), "built, but {} does not exist", bin.display());
    Ok(bin)
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir(root: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return root.join(dir); // an absolute dir replaces root
    }
    // <target>/<profile>/deps/<this test binary>
    let from_exe = std::env::current_exe().ok().and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf));
    from_exe.filter(|d| d.join("debug").is_dir() || d.join("release").is_dir()).unwrap_or_else(|| root.join("target"))
}

fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Which substrate `serve` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    Local,
    Memory,
    /// DynamoDB/S3/Scheduler, configured by [`ServerOpts::env`] (`AWS_*`, `DS_AWS_*`).
    Aws,
}

impl Store {
    fn flag(self) -> &'static str {
        match self {
            Store::Local => "local",
            Store::Memory => "memory",
            Store::Aws => "aws",
        }
    }
}

/// How to start a server.
#[derive(Debug, Clone)]
pub struct ServerOpts {
    pub store: Store,
    /// Local store directory; `None` makes a fresh temp dir owned by the server.
    pub data_dir: Option<PathBuf>,
    pub max_body_bytes: Option<usize>,
    pub long_poll_timeout: &'static str,
    /// More `serve` flags (access control, TLS, limits, …).
    pub extra_args: Vec<String>,
    /// The CA that signed the server's `--tls-cert`: the server is reached
    /// over `https://` with a client trusting it.
    pub ca_pem: Option<String>,
    /// Environment variables set for the process.
    pub env: Vec<(String, String)>,
    /// Listen on this port (to restart a server at the address its clients
    /// know); else on a free one.
    pub port: Option<u16>,
}

impl Default for ServerOpts {
    fn default() -> Self {
        Self {
            store: Store::Local,
            data_dir: None,
            max_body_bytes: None,
            long_poll_timeout: "500ms",
            extra_args: Vec::new(),
            ca_pem: None,
            env: Vec::new(),
            port: None,
        }
    }
}

/// A running server process; killed (SIGKILL) on drop if still running.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub data_dir: PathBuf,
    /// A client trusting the server's test CA, when it serves TLS.
    pub tls: Option<crate::TlsClient>,
    log_path: PathBuf,
    _log_dir: TempDir,
    _own_data: Option<TempDir>,
}

impl Server {
    /// A local-store server over a fresh temp data dir.
    pub async fn local() -> anyhow::Result<Self> {
        Self::start(ServerOpts::default()).await
    }

    /// Spawn the binary on a free 127.0.0.1 port and wait until it answers.
    /// Retries with another port if the chosen one was taken meanwhile.
    pub async fn start(opts: ServerOpts) -> anyhow::Result<Self> {
        let bin = server_bin();
        let (data_dir, own_data) = match &opts.data_dir {
            Some(dir) => (dir.clone(), None),
            None => {
                let tmp = tempfile::tempdir().context("temp data dir")?;
                (tmp.path().join("data"), Some(tmp))
            }
        };
        let mut own_data = own_data;
        let mut last_err = None;
        for _ in 0..5 {
            let port = match opts.port {
                Some(port) => port,
                None => free_port()?,
            };
            let log_dir = tempfile::tempdir().context("temp log dir")?;
            let log_path = log_dir.path().join("server.log");
            let log = File::create(&log_path).context("creating the server log")?;
            let mut cmd = Command::new(&bin);
            cmd.arg("serve")
                .args(["--bind", &format!("127.0.0.1:{port}")])
                .args(["--store", opts.store.flag()])
                .arg("--data-dir")
                .arg(&data_dir)
                .args(["--long-poll-timeout", opts.long_poll_timeout]);
            if let Some(max) = opts.max_body_bytes {
                cmd.args(["--max-body-bytes", &max.to_string()]);
            }
            cmd.args(&opts.extra_args).envs(opts.env.iter().map(|(k, v)| (k, v)));
            cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
            let child = cmd.spawn().with_context(|| format!("spawning {}", bin.display()))?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let tls = opts.ca_pem.as_deref().map(|ca| crate::TlsClient::new(ca, &[b"h2", b"http/1.1"])).transpose()?;
            let scheme = if tls.is_some() { "https" } else { "http" };
            let mut server = Server {
                child,
                addr,
                base: format!("{scheme}://{addr}"),
                data_dir: data_dir.clone(),
                tls,
                log_path,
                _log_dir: log_dir,
                _own_data: None,
            };
            match server.wait_ready().await {
                Ok(()) => {
                    server._own_data = own_data.take();
                    return Ok(server);
                }
                Err(e) => {
                    let log = server.log_tail();
                    let port_taken = log.contains("binding") || log.contains("in use");
                    last_err = Some(e.context(format!("server log:\n{log}")));
                    if !port_taken {
                        break;
                    }
                }
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("server did not start")))
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let client = crate::client();
        let deadline = Instant::now() + READY_TIMEOUT;
        let url = format!("{}/health", self.base);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("server exited before answering: {status}");
            }
            let ok = match &self.tls {
                Some(tls) => tls.send("GET", &url, &[], Vec::new()).await.is_ok_and(|r| r.status == 200),
                None => {
                    client.get(&url).timeout(Duration::from_secs(2)).send().await.is_ok_and(|r| r.status().is_success())
                }
            };
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("server did not answer {url} within {READY_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `{base}/v1/stream/{path}`
    pub fn url(&self, path: &str) -> String {
        format!("{}/v1/stream/{path}", self.base)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `kill -9`: the process dies wherever it is (crash simulation).
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        self.child.kill().context("SIGKILL")?;
        self.child.wait().context("reaping the killed server")?;
        Ok(())
    }

    /// `kill -TERM` and wait up to `timeout` for a graceful exit; `None` if
    /// it is still running then (it is killed on drop).
    pub async fn terminate(&mut self, timeout: Duration) -> anyhow::Result<Option<ExitStatus>> {
        let status = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status().context("running kill")?;
        ensure!(status.success(), "kill -TERM {} failed: {status}", self.pid());
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The last few KB of the server's stdout/stderr.
    pub fn log_tail(&self) -> String {
        tail(&self.log(), 4000).to_owned()
    }

    /// The server's whole stdout/stderr so far.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log_path).unwrap_or_default()).into_owned()
    }

    /// Panic unless the process still runs and `/health` answers 200: a
    /// request must never have crashed or wedged the server.
    pub async fn assert_answers(&mut self) {
        assert!(self.is_running(), "server process died; log:\n{}", self.log_tail());
        let resp = crate::client().get(format!("{}/health", self.base)).send().await;
        let status = resp.as_ref().map(|r| r.status().as_u16());
        assert!(matches!(status, Ok(200)), "server does not answer /health: {status:?}; log:\n{}", self.log_tail());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A port that was free a moment ago on 127.0.0.1.
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
