//! Collecting expectation failures so one run reports every bad answer.

use std::fmt::Write;

/// Expected statuses, checked one by one and reported together; any 5xx is
/// called out as such.
#[derive(Default)]
pub struct Checks {
    failures: Vec<String>,
    count: usize,
}

impl Checks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Record `what` answered `got` (with `body`), where one of `want` is required.
    pub fn status(&mut self, what: &str, got: u16, body: &[u8], want: &[u16]) {
        self.count += 1;
        if !want.contains(&got) {
            let kind = if got >= 500 { " (SERVER ERROR)" } else { "" };
            let body = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
            self.failures.push(format!("{what}: got {got}{kind}, want {want:?}; body {body:?}"));
        }
    }

    /// Send a reqwest request and check its status.
    pub async fn send(&mut self, what: &str, req: reqwest::RequestBuilder, want: &[u16]) {
        match req.send().await {
            Ok(resp) => {
                let got = resp.status().as_u16();
                let body = resp.bytes().await.unwrap_or_default();
                self.status(what, got, &body, want);
            }
            Err(e) => {
                self.count += 1;
                let mut chain = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    let _ = write!(chain, ": {s}");
                    source = s.source();
                }
                self.failures.push(format!("{what}: request failed: {chain}"));
            }
        }
    }

    /// How many checks were made so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Record a free-form failure.
    pub fn fail(&mut self, msg: String) {
        self.count += 1;
        self.failures.push(msg);
    }

    /// Panic listing every failure, if any.
    pub fn finish(self, context: &str) {
        if self.failures.is_empty() {
            return;
        }
        let mut msg = format!("{context}: {} of {} checks failed:\n", self.failures.len(), self.count);
        for f in &self.failures {
            let _ = writeln!(msg, "  - {f}");
        }
        panic!("{msg}");
    }
}
