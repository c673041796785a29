//! A TCP fault proxy on loopback: put between a server and the AWS
//! emulator (the server's `AWS_ENDPOINT_URL` names the proxy), it passes
//! bytes both ways until told to misbehave:
//!
//! - [`Mode::Delay`]: every chunk waits before it is passed on;
//! - [`Mode::Drop`]: new connections are closed at once, unanswered;
//! - [`Mode::Reset`]: every open connection is reset (TCP RST), and so is
//!   each new one while the mode lasts;
//! - [`Mode::Blackhole`]: nothing is passed on and nothing comes back;
//!   new connections are accepted and left hanging; when the mode ends,
//!   every connection is reset;
//! - [`Mode::CutAnswers`]: requests go through, and a connection is reset
//!   as the answer's first bytes arrive: the request was applied, its
//!   answer lost (the network's "unknown outcome");
//! - [`Mode::CloseAnswers`]: the same, closed with a FIN instead (the
//!   client reads an end of stream where the answer should be).
//!
//! [`FaultProxy::only_requests_containing`] narrows the answer faults to
//! requests carrying a marker (e.g. one DynamoDB operation's target).
//! Every fault is counted by kind.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to traffic now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Delay(Duration),
    Drop,
    Reset,
    Blackhole,
    CutAnswers,
    CloseAnswers,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Pass => "pass",
            Mode::Delay(_) => "delay",
            Mode::Drop => "drop",
            Mode::Reset => "reset",
            Mode::Blackhole => "blackhole",
            Mode::CutAnswers => "cut answers",
            Mode::CloseAnswers => "closed answers",
        }
    }
}

struct State {
    upstream: SocketAddr,
    mode: Mutex<Mode>,
    /// Bumped to reset every open connection.
    resets: watch::Sender<u64>,
    counts: Mutex<BTreeMap<String, u64>>,
    /// Answer faults only for requests containing this.
    marker: Mutex<Option<Vec<u8>>>,
}

impl State {
    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn count(&self, what: &str) {
        *self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(what.to_owned()).or_default() += 1;
    }
}

/// See the module docs. Stops accepting when dropped.
pub struct FaultProxy {
    pub addr: SocketAddr,
    state: Arc<State>,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listen on 127.0.0.1 (a free port) and relay to `upstream`, which
    /// must be on loopback.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        assert!(upstream.ip().is_loopback(), "the fault proxy relays to loopback only, not {upstream}");
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            upstream,
            mode: Mutex::new(Mode::Pass),
            resets: watch::channel(0).0,
            counts: Mutex::new(BTreeMap::new()),
            marker: Mutex::new(None),
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        Ok(Self { addr, state, accept })
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn mode(&self) -> Mode {
        self.state.mode()
    }

    /// Switch to `mode` (counted as one episode of its kind).
    pub fn set(&self, mode: Mode) {
        let before =
            std::mem::replace(&mut *self.state.mode.lock().unwrap_or_else(std::sync::PoisonError::into_inner), mode);
        if mode != Mode::Pass {
            self.state.count(&format!("{} episodes", mode.name()));
        }
        if mode == Mode::Reset || (before == Mode::Blackhole && mode != Mode::Blackhole) {
            self.state.resets.send_modify(|n| *n += 1);
        }
    }

    /// Answer faults ([`Mode::CutAnswers`], [`Mode::CloseAnswers`]) only
    /// for requests whose bytes contain `marker` (`None`: for all).
    pub fn only_requests_containing(&self, marker: Option<&str>) {
        *self.state.marker.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            marker.map(|m| m.as_bytes().to_vec());
    }

    /// Faults by kind so far.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.state.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.state.resets.send_modify(|n| *n += 1);
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    loop {
        let Ok((client, _)) = listener.accept().await else { continue };
        let _ = client.set_nodelay(true);
        match state.mode() {
            Mode::Drop => {
                state.count("connections dropped");
                drop(client);
            }
            Mode::Reset => {
                state.count("connections reset");
                reset(client);
            }
            _ => {
                tokio::spawn(relay(client, Arc::clone(&state)));
            }
        }
    }
}

/// Close with RST instead of FIN.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// How a relayed connection ended.
enum End {
    Done,
    Reset(&'static str),
    Close(&'static str),
}

async fn relay(client: TcpStream, state: Arc<State>) {
    let mut resets = state.resets.subscribe();
    resets.mark_unchanged();
    if state.mode() == Mode::Blackhole {
        // Accepted, never answered: held until the blackhole ends.
        state.count("connections blackholed");
        let _ = resets.changed().await;
        reset(client);
        return;
    }
    let Ok(upstream) = TcpStream::connect(state.upstream).await else {
        reset(client);
        return;
    };
    let _ = upstream.set_nodelay(true);
    let (mut client, mut upstream) = (client, upstream);
    let end = {
        let (mut cr, mut cw) = client.split();
        let (mut ur, mut uw) = upstream.split();
        let marked = std::sync::atomic::AtomicBool::new(false);
        let both = async {
            tokio::try_join!(
                pump(&mut cr, &mut uw, Side::Requests, &state, &marked),
                pump(&mut ur, &mut cw, Side::Answers, &state, &marked)
            )
        };
        tokio::select! {
            r = both => match r {
                Ok(_) => End::Done,
                Err(end) => end,
            },
            _ = resets.changed() => End::Reset("connections reset"),
        }
    };
    match end {
        End::Done => {}
        End::Reset(why) => {
            if !why.is_empty() {
                state.count(why);
            }
            reset(client);
        }
        End::Close(why) => {
            state.count(why);
            drop(client);
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Requests,
    Answers,
}

/// Whether `chunk` begins an HTTP request.
fn starts_request(chunk: &[u8]) -> bool {
    ["GET ", "PUT ", "POST ", "HEAD ", "DELETE "].iter().any(|m| chunk.starts_with(m.as_bytes()))
}

/// Copy one direction, as the mode says, until EOF; `Err` says how the
/// connection ends instead. `marked`: the request being answered carries
/// the marker (or there is none).
async fn pump<R, W>(from: &mut R, to: &mut W, side: Side, state: &State, marked: &AtomicBool) -> Result<(), End>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // A peer's own error ends the connection; not a fault of ours to count.
        let n = from.read(&mut buf).await.map_err(|_| End::Reset(""))?;
        if n == 0 {
            let _ = to.shutdown().await;
            return Ok(());
        }
        if side == Side::Requests && starts_request(&buf[..n]) {
            let marker = state.marker.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            let hit = marker.is_none_or(|m| buf[..n].windows(m.len()).any(|w| w == m.as_slice()));
            marked.store(hit, std::sync::atomic::Ordering::SeqCst);
        }
        let cut = side == Side::Answers && marked.load(std::sync::atomic::Ordering::SeqCst);
        match state.mode() {
            Mode::Blackhole => {
                state.count("chunks blackholed");
                continue;
            }
            Mode::CutAnswers if cut => return Err(End::Reset("answers cut")),
            Mode::CloseAnswers if cut => return Err(End::Close("answers closed")),
            Mode::Delay(d) => {
                state.count("chunks delayed");
                tokio::time::sleep(d).await;
            }
            _ => {}
        }
        to.write_all(&buf[..n]).await.map_err(|_| End::Reset(""))?;
    }
}
