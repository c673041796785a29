//! A private AWS emulator (`infra/aws-emulator`, moto) for one test or
//! campaign: its own port and run directory, because fault rules apply to
//! every client of an emulator. Started with `start.sh --port 0`, given the
//! table, bucket and schedule group by `create-resources`, stopped (by the
//! PID `start.sh` recorded) on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::client;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// See the module docs.
pub struct Emulator {
    dir: tempfile::TempDir,
    /// The client environment (`AWS_ENDPOINT_URL`, credentials, region,
    /// `DS_AWS_TABLE`, ...) for a server or SDK client using it.
    pub env: Vec<(String, String)>,
    /// `http://127.0.0.1:PORT`
    pub url: String,
}

impl Emulator {
    /// Start one and create the resources; `Err` says why not.
    pub fn start() -> Result<Self, String> {
        Self::start_with(&[])
    }

    /// [`Emulator::start`] with settings of the emulator's own in its
    /// environment (`AWS_EMULATOR_*`, see infra/aws-emulator/serve.py).
    pub fn start_with(settings: &[(&str, &str)]) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("bash")
            .envs(settings.iter().copied())
            .arg(root().join("infra/aws-emulator/start.sh"))
            .args(["--port", "0", "--dir"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("running start.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!("start.sh failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let env: Vec<(String, String)> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let url = lookup(&env, "AWS_ENDPOINT_URL").ok_or("start.sh printed no AWS_ENDPOINT_URL")?;
        // From here on, dropping `emulator` stops it.
        let mut emulator = Self { url, dir, env };
        let out = Command::new("bash")
            .arg(root().join("infra/aws-emulator/create-resources"))
            .envs(emulator.env.iter().map(|(k, v)| (k, v)))
            .output()
            .map_err(|e| format!("running create-resources: {e}"))?;
        if !out.status.success() {
            return Err(format!("create-resources failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        emulator.env.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        Ok(emulator)
    }

    /// [`Emulator::start`], or `None` with a loud message when it cannot
    /// start; a failure then when `DS_TEST_REQUIRE_AWS` is set.
    pub fn start_or_skip(what: &str) -> Option<Self> {
        match Self::start() {
            Ok(e) => Some(e),
            Err(why) => {
                assert!(std::env::var_os("DS_TEST_REQUIRE_AWS").is_none(), "DS_TEST_REQUIRE_AWS is set: {why}");
                eprintln!("SKIPPED {what}: no emulator ({why})");
                None
            }
        }
    }

    /// A variable of [`Emulator::env`].
    pub fn var(&self, key: &str) -> Option<String> {
        lookup(&self.env, key)
    }

    /// The emulator's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.url.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0)
    }

    /// `/_emulator/faults`: `POST` adds rules (`body`), `GET` reads the
    /// counts, `DELETE` reads them and removes every rule. Panics unless
    /// the emulator answers 2xx.
    pub async fn faults(&self, method: reqwest::Method, body: Option<serde_json::Value>) -> serde_json::Value {
        let mut req = client().request(method, format!("{}/_emulator/faults", self.url));
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body.to_string());
        }
        let resp = req.send().await.expect("the emulator answers /_emulator/faults");
        let ok = resp.status().is_success();
        let text = resp.text().await.unwrap_or_default();
        assert!(ok, "{text}");
        serde_json::from_str(&text).expect("JSON from /_emulator/faults")
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(root().join("infra/aws-emulator/stop.sh"))
            .arg("--dir")
            .arg(self.dir.path())
            .output();
    }
}

fn lookup(env: &[(String, String)], key: &str) -> Option<String> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}
