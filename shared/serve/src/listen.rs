//! The server loop: accept, hand each connection to its own task (the TLS
//! handshake, if any, runs there under the header-read timeout), serve it
//! (`connection.rs`), shut down gracefully.
//!
//! `axum::serve` sets no timer, so a connection that sends half a request
//! head, or nothing at all, or never reads its response, is held forever.
//! Here every connection's socket is guarded (see `guard.rs`): a read or
//! write that waits past the deadline of the connection's phase fails and
//! the connection is dropped. A request's body has its own inactivity
//! limit in the surface's handlers.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::connection::{self, FastPath, Protocol};
use crate::limits::ConnLimits;
use crate::surface::Surface;

/// Turns an accepted TCP connection into the byte stream HTTP is served on:
/// as is ([`PlainTcp`]), or after a TLS handshake (the server binary's).
pub trait Handshake: Send + Sync + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn handshake(&self, tcp: TcpStream) -> impl Future<Output = io::Result<(Self::Io, Protocol)>> + Send;
}

/// Plain HTTP/1.1 over TCP.
pub struct PlainTcp;

impl Handshake for PlainTcp {
    type Io = TcpStream;
    async fn handshake(&self, tcp: TcpStream) -> io::Result<(TcpStream, Protocol)> {
        Ok((tcp, Protocol::Http1))
    }
}

/// How long connections get to finish after shutdown begins; the rest are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Plain HTTP/1.1: [`serve_with`] and [`PlainTcp`].
pub async fn serve(
    listener: TcpListener,
    surface: impl Surface,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) {
    serve_with(listener, surface, limits, PlainTcp, shutdown).await;
}

/// Accept connections on `listener` and serve `surface` on each until
/// `shutdown` completes; then stop accepting, let every connection finish
/// its request in progress (idle ones close at once), and return when all
/// are closed or `SHUTDOWN_GRACE` (30 s) has passed.
pub async fn serve_with<H: Handshake>(
    listener: TcpListener,
    surface: impl Surface,
    limits: ConnLimits,
    handshake: H,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let limits = Arc::new(limits);
    let handshake = Arc::new(handshake);
    let mut shutdown = pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _peer)) => tcp,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Small writes (SSE events) must not wait for the peer's delayed ACK.
        let _ = tcp.set_nodelay(true);
        let (surface, limits, handshake, stop) =
            (surface.clone(), Arc::clone(&limits), Arc::clone(&handshake), stop_rx.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(limits.header_read_timeout, handshake.handshake(tcp)).await {
                Ok(Ok((io, protocol))) => {
                    connection::run(io, protocol, FastPath::On, surface, limits, Some(stop)).await;
                }
                Ok(Err(e)) => tracing::debug!(error = %e, "handshake failed"),
                Err(_) => tracing::debug!("handshake timed out"),
            }
        });
    }
    drop(listener);
    drop(stop_rx);
    stop_tx.send_replace(true);
    // Resolves once every connection task has dropped its receiver.
    if tokio::time::timeout(SHUTDOWN_GRACE, stop_tx.closed()).await.is_err() {
        tracing::warn!(grace = ?SHUTDOWN_GRACE, "connections still open after the shutdown grace; dropping them");
    }
}

/// As `axum::serve`: a failed accept (e.g. `EMFILE`) is logged and retried
/// after a pause, instead of spinning or stopping the server.
async fn accept_error(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 1s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
