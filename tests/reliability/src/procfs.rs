//! Resident memory and open file descriptors of a process (Linux `/proc`).

use anyhow::Context;

/// `VmRSS` of `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading /proc/PID/status")?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).context("no VmRSS line")?;
    let kb: u64 = line.split_whitespace().nth(1).context("VmRSS value")?.parse().context("VmRSS number")?;
    Ok(kb * 1024)
}

/// Number of open file descriptors of `pid`.
pub fn open_fds(pid: u32) -> anyhow::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd")).context("listing /proc/PID/fd")?.count())
}

/// The 1, 5 and 15 minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(", "))
        .unwrap_or_else(|_| "unknown".into())
}
