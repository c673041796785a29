//! Server processes: the list of servers under test, spawning one on a free
//! 127.0.0.1 port, P6 cold start (spawn → first successful PUT), RSS, and
//! stopping it again by its PID.

use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// Acknowledges from memory; compared only with other memory servers.
    Memory,
    /// Syncs to disk before acknowledging; compared only with durable ones.
    Durable,
}

impl Class {
    pub fn label(self) -> &'static str {
        match self {
            Class::Memory => "memory",
            Class::Durable => "durable",
        }
    }
}

/// One server configuration under test (a line of the servers file).
#[derive(Clone, Debug)]
pub struct ServerSpec {
    pub name: String,
    pub class: Class,
    pub ours: bool,
    /// Path prefix of stream URLs ("/v1/stream", or "" for `/<name>`).
    pub prefix: String,
    /// Executable whose on-disk size is P6's binary size (None: not applicable).
    pub binary: Option<PathBuf>,
    /// Command line; `{port}` and `{dir}` (a fresh data directory) are substituted.
    pub command: String,
}

/// Parses the servers file: tab-separated
/// `name  class(memory|durable)  role(ours|peer)  prefix(-=none)  binary(-=n/a)  command`,
/// with `#` comments and blank lines ignored.
pub fn parse_servers(text: &str) -> Result<Vec<ServerSpec>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.splitn(6, '\t').collect();
        let [name, class, role, prefix, binary, command] = f[..] else {
            bail!("servers file line {}: expected 6 tab-separated fields, got {}", i + 1, f.len());
        };
        let class = match class {
            "memory" => Class::Memory,
            "durable" => Class::Durable,
            other => bail!("servers file line {}: class {other:?} is not memory|durable", i + 1),
        };
        let ours = match role {
            "ours" => true,
            "peer" => false,
            other => bail!("servers file line {}: role {other:?} is not ours|peer", i + 1),
        };
        let none = |s: &str| if s == "-" { None } else { Some(s.to_string()) };
        out.push(ServerSpec {
            name: name.to_string(),
            class,
            ours,
            prefix: none(prefix).unwrap_or_default(),
            binary: none(binary).map(PathBuf::from),
            command: command.to_string(),
        });
    }
    Ok(out)
}

/// A started server.
pub struct Running {
    child: Child,
    pub pid: u32,
    pub base: String,
    pub cold_start: Duration,
    data_dir: Option<PathBuf>,
    pub log: PathBuf,
}

/// Picks a free port by binding port 0 and releasing it.
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Spawns the server and polls a PUT every millisecond until one succeeds;
/// the time from spawn to that success is the cold start.
pub async fn start(spec: &ServerSpec, work: &Path, label: &str) -> Result<Running> {
    let port = free_port()?;
    let stem = format!("{}-{label}", spec.name);
    let data_dir = spec.command.contains("{dir}").then(|| work.join(format!("{stem}.data")));
    if let Some(d) = &data_dir {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d)?;
    }
    let cmdline = spec
        .command
        .replace("{port}", &port.to_string())
        .replace("{dir}", &data_dir.as_deref().map(|d| d.display().to_string()).unwrap_or_default());
    let (vars, argv) = environment(&cmdline);
    let (prog, args) = argv.split_first().ok_or_else(|| anyhow!("{}: empty command", spec.name))?;
    let log = work.join(format!("{stem}.log"));
    let out = std::fs::File::create(&log)?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(prog);
    cmd.envs(vars).args(args).stdin(Stdio::null()).stdout(out).stderr(err).kill_on_drop(true);

    // Write back what earlier servers (and removing their data dirs) left
    // dirty first: otherwise a durable server's first fsync at start-up
    // waits for that write-back, and its cold start depends on which server
    // ran before it.
    let synced = Command::new("sync").status().await;
    if !synced.as_ref().is_ok_and(|s| s.success()) {
        bail!("`sync` before starting {} failed: {synced:?}", spec.name);
    }
    let t0 = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("spawning {cmdline}"))?;
    let pid = child.id().ok_or_else(|| anyhow!("{}: no pid", spec.name))?;
    if let Ok(f) = std::env::var("DS_LOAD_PIDFILE") {
        // Lets bench.sh's exit trap stop this server if ds-load itself dies.
        std::fs::write(f, pid.to_string())?;
    }
    let base = format!("http://127.0.0.1:{port}");
    let probe = reqwest::Client::builder().timeout(Duration::from_secs(2)).pool_max_idle_per_host(0).build()?;
    let url = format!("{base}{}/ds-load-coldstart", spec.prefix);
    loop {
        let ok = probe
            .put(&url)
            .header("content-type", crate::client::BINARY)
            .send()
            .await
            .map(|r| r.status().is_success())
            .unwrap_or(false);
        if ok {
            break;
        }
        if let Some(status) = child.try_wait()? {
            bail!("{} exited during start-up ({status}); log {}:\n{}", spec.name, log.display(), tail(&log));
        }
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("{} did not accept a PUT within 60 s; log {}:\n{}", spec.name, log.display(), tail(&log));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let cold_start = t0.elapsed();
    Ok(Running { child, pid, base, cold_start, data_dir, log })
}

/// A command line's words, with a leading `env NAME=value ...` taken off
/// and returned as the variables to set: the server is then spawned
/// directly, so its cold start does not include starting env(1) (about
/// 1 ms here) and every server's P6 is its own exec to its first answer.
fn environment(cmdline: &str) -> (Vec<(&str, &str)>, Vec<&str>) {
    let mut words = cmdline.split_whitespace().peekable();
    let mut vars = Vec::new();
    if words.peek() == Some(&"env") {
        words.next();
        while let Some((name, value)) = words.peek().and_then(|w| w.split_once('=')) {
            vars.push((name, value));
            words.next();
        }
    }
    (vars, words.collect())
}

impl Running {
    /// SIGTERM by PID (via kill(1): this crate forbids unsafe), SIGKILL after
    /// 5 s, then remove the data directory.
    pub async fn stop(mut self) -> Result<()> {
        let _ = std::process::Command::new("kill").arg(self.pid.to_string()).status();
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await.is_err() {
            self.child.kill().await?;
        }
        if let Ok(f) = std::env::var("DS_LOAD_PIDFILE") {
            let _ = std::fs::remove_file(f);
        }
        if let Some(d) = &self.data_dir {
            let _ = std::fs::remove_dir_all(d);
        }
        Ok(())
    }
}

/// Resident set size of a process, from `VmRSS` in /proc/<pid>/status.
pub fn rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).ok_or_else(|| anyhow!("no VmRSS for pid {pid}"))?;
    let kb: u64 = line.split_whitespace().nth(1).ok_or_else(|| anyhow!("bad VmRSS line"))?.parse()?;
    Ok(kb * 1024)
}

/// Last lines of a log, for start-up failures.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_servers_file() {
        let text = "# comment\n\nours-memory\tmemory\tours\t/v1/stream\t/bin/x\tx serve --bind 127.0.0.1:{port}\n\
                    ds-durable\tdurable\tpeer\t-\t-\tds --port {port} --data {dir}\n";
        let s = parse_servers(text).expect("parse");
        assert_eq!(s.len(), 2);
        assert!(s[0].ours && s[0].class == Class::Memory && s[0].prefix == "/v1/stream");
        assert!(!s[1].ours && s[1].class == Class::Durable && s[1].prefix.is_empty() && s[1].binary.is_none());
        assert!(parse_servers("a\tfast\tours\t-\t-\tx").is_err());
    }

    #[test]
    fn a_leading_env_becomes_the_spawned_server_s_environment() {
        let (vars, argv) = environment("env RUST_LOG=warn A=b=c /bin/x serve --bind 127.0.0.1:1 X=y");
        assert_eq!(vars, [("RUST_LOG", "warn"), ("A", "b=c")]);
        assert_eq!(argv, ["/bin/x", "serve", "--bind", "127.0.0.1:1", "X=y"]);
        let (vars, argv) = environment("ds --port 1 --data-dir /d");
        assert!(vars.is_empty());
        assert_eq!(argv, ["ds", "--port", "1", "--data-dir", "/d"]);
    }

    #[test]
    fn reads_own_rss() {
        assert!(rss_bytes(std::process::id()).expect("rss") > 0);
    }
}
