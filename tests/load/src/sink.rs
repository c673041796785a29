//! The trivial server the calibration measures the load tool against:
//! hyper's HTTP/1.1 server on tokio's multi-threaded runtime (the stack our
//! server is built on) that reads each request body and answers `204`.
//! Whatever rate a load tool gets from it is that tool's ceiling on this
//! machine: no Durable Streams server can be measured faster than that.

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use tokio::net::TcpListener;

async fn answer(req: Request<hyper::body::Incoming>) -> Result<Response<Empty<Bytes>>, Infallible> {
    let status = match req.into_body().collect().await {
        Ok(_) => StatusCode::NO_CONTENT,
        Err(_) => StatusCode::BAD_REQUEST,
    };
    let mut resp = Response::new(Empty::new());
    *resp.status_mut() = status;
    Ok(resp)
}

/// Serves until the process is killed.
pub async fn serve(listener: TcpListener) -> Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(async move {
            // A client hanging up mid-request is not the sink's concern.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service_fn(answer)).await;
        });
    }
}
