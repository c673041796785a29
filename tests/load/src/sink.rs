//! The trivial server the calibration measures the load tool against:
//! hyper's HTTP/1.1 server on tokio's multi-threaded runtime (the stack our
//! server is built on) that reads each request body and answers `204`, and
//! answers a `GET` with one prepared up-to-date catch-up body (P2's reader).
//! Whatever rate a load tool gets from it is that tool's ceiling on this
//! machine: no Durable Streams server can be measured faster than that.

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use tokio::net::TcpListener;

async fn answer(req: Request<hyper::body::Incoming>, catch_up: Bytes) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() == Method::GET {
        let mut resp = Response::new(Full::new(catch_up));
        let h = resp.headers_mut();
        h.insert("content-type", HeaderValue::from_static("application/octet-stream"));
        h.insert("stream-next-offset", HeaderValue::from_static("1"));
        h.insert("stream-up-to-date", HeaderValue::from_static("true"));
        return Ok(resp);
    }
    let status = match req.into_body().collect().await {
        Ok(_) => StatusCode::NO_CONTENT,
        Err(_) => StatusCode::BAD_REQUEST,
    };
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = status;
    Ok(resp)
}

/// Serves until the process is killed; a `GET` gets `read_bytes` bytes.
pub async fn serve(listener: TcpListener, read_bytes: usize) -> Result<()> {
    let catch_up = Bytes::from(vec![b'.'; read_bytes]);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let catch_up = catch_up.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| answer(req, catch_up.clone()));
            // A client hanging up mid-request is not the sink's concern.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}
