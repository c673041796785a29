//! The busy-machine guard: how much CPU did *other* processes use while a
//! measurement ran? Machine-wide busy time from `/proc/stat` minus the
//! server's and this tool's own (`/proc/<pid>/stat`, children that exited
//! and were reaped included, so a wrk run counts as ours), over wall time.
//!
//! Busy time counts user, nice, system, irq and softirq. A figure above
//! `BUSY_LIMIT` cores means something else competed for the two cores and
//! the run's speed figures are not the server's alone.

use std::time::Instant;

/// Other processes' CPU above which a run is flagged (and repeated when the
/// workload allows it).
pub const BUSY_LIMIT: f64 = 0.25;

/// A start point; `finish` gives the others' average use since then.
pub struct CpuMeter {
    pids: Vec<u32>,
    at: Instant,
    machine: u64,
    own: u64,
}

impl CpuMeter {
    /// Starts measuring; `pids` are ours (this process is always included).
    pub fn start(pids: &[u32]) -> Self {
        let mut pids = pids.to_vec();
        pids.push(std::process::id());
        pids.sort_unstable();
        pids.dedup();
        let (machine, own) = (machine_busy_ticks().unwrap_or(0), own_ticks(&pids));
        Self { pids, at: Instant::now(), machine, own }
    }

    /// Average cores used by other processes since `start` (never below 0:
    /// tick rounding can make our own share look larger than the machine's).
    pub fn others_cores(&self) -> Option<f64> {
        let machine = machine_busy_ticks()?;
        let own = own_ticks(&self.pids);
        let secs = self.at.elapsed().as_secs_f64();
        if secs <= 0.0 {
            return None;
        }
        let others = machine.saturating_sub(self.machine) as f64 - own.saturating_sub(self.own) as f64;
        Some((others / ticks_per_second() / secs).max(0.0))
    }
}

/// True when a figure says the machine was busy.
pub fn is_busy(others: Option<f64>) -> bool {
    others.is_some_and(|o| o > BUSY_LIMIT)
}

/// CPU time (user + system, reaped children included) process `pid` has
/// used so far, in seconds.
pub fn process_cpu_secs(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(parse_pid_stat(&text)? as f64 / ticks_per_second())
}

/// USER_HZ: the unit of /proc's CPU times (100 on every mainstream Linux;
/// `getconf CLK_TCK` says otherwise if not).
fn ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// user + nice + system + irq + softirq of the `cpu` line of /proc/stat.
fn machine_busy_ticks() -> Option<u64> {
    parse_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

fn parse_stat(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal ...
    Some(v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)?)
}

fn own_ticks(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .filter_map(|s| parse_pid_stat(&s))
        .sum()
}

/// utime + stime + cutime + cstime of a /proc/<pid>/stat line.
fn parse_pid_stat(text: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces: fields resume after ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14 → index 11.
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
    Some((n(11)? + n(12)? + n(13)? + n(14)?).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat() {
        let stat = "cpu  100 5 50 9000 7 3 2 11 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(parse_stat(stat), Some(100 + 5 + 50 + 3 + 2));
        let pid = "1234 (a name) with) S 1 2 3 4 5 6 7 8 9 10 40 60 7 3 20 0 1 0 100";
        assert_eq!(parse_pid_stat(pid), Some(40 + 60 + 7 + 3));
    }

    #[test]
    fn own_cpu_is_counted_as_ours() {
        let me = [std::process::id()];
        let before = own_ticks(&me);
        // Spin until /proc says this process used 0.2 s of CPU: it must get
        // there (our own time is what gets subtracted from the machine's),
        // however busy the machine is; 20 s of wall time is the bound.
        let t = Instant::now();
        let mut x = 0u64;
        let mut ours = 0.0;
        while ours < 0.2 && t.elapsed().as_secs() < 20 {
            for _ in 0..1_000_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            ours = own_ticks(&me).saturating_sub(before) as f64 / ticks_per_second();
        }
        std::hint::black_box(x);
        assert!(ours >= 0.2, "own CPU {ours} s after {:?}", t.elapsed());
        assert!(CpuMeter::start(&[]).others_cores().is_some());
    }
}
