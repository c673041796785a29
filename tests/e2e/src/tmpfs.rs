//! A size-limited tmpfs, the one full disk a test can make: mounted on a
//! fresh temp dir (needs root, else `mount` says why), resized with
//! `remount`, unmounted on drop.

use std::path::Path;
use std::process::Command;

/// See the module docs.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `Err` (with the reason) when this process cannot mount.
    pub fn mount(size: &str) -> Result<Self, String> {
        let uid = Command::new("id").arg("-u").output().map_err(|e| format!("running id -u: {e}"))?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err("not running as root (id -u is not 0)".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(format!("mount -t tmpfs failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Self { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Remount with a new size (`64m`, or bytes); `Err` with `mount`'s
    /// reason (a size below what is in use is refused).
    pub fn resize(&self, size: &str) -> Result<(), String> {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.dir.path())
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("remount to {size}: {}", String::from_utf8_lossy(&out.stderr).trim()))
        }
    }

    /// Bytes in use on the file system.
    pub fn used(&self) -> Result<u64, String> {
        let out = Command::new("df")
            .args(["--output=used", "-B1"])
            .arg(self.dir.path())
            .output()
            .map_err(|e| format!("running df: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines().nth(1).and_then(|l| l.trim().parse().ok()).ok_or_else(|| format!("df said {text:?}"))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}
