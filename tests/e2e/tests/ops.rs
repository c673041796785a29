//! Operating the server: HTTPS with HTTP/1.1 and HTTP/2 (test CA made now),
//! Prometheus `/metrics` that parses and moves, `/health`.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use ds_e2e::{Server, ServerOpts, Store, TlsClient};

#[tokio::test]
async fn https_with_http1_and_http2() {
    let pki = ds_testpki::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("server.pem"), dir.path().join("server.key"));
    std::fs::write(&cert, &pki.cert_pem).unwrap();
    std::fs::write(&key, &pki.key_pem).unwrap();
    let args = vec!["--tls-cert".into(), cert.display().to_string(), "--tls-key".into(), key.display().to_string()];
    let opts = ServerOpts {
        store: Store::Memory,
        extra_args: args,
        ca_pem: Some(pki.ca_pem.clone()),
        ..ServerOpts::default()
    };
    let server = Server::start(opts).await.unwrap();
    assert!(server.base.starts_with("https://127.0.0.1:"));
    for (alpn, version) in [(&b"h2"[..], http::Version::HTTP_2), (&b"http/1.1"[..], http::Version::HTTP_11)] {
        let client = TlsClient::new(&pki.ca_pem, &[alpn]).unwrap();
        let url = server.url(&format!("tls-{}", String::from_utf8_lossy(alpn)));
        let created = client.send("PUT", &url, &[("content-type", "text/plain")], b"hello ".to_vec()).await.unwrap();
        assert_eq!((created.status, created.version), (201, version));
        let location = created.headers.get("location").unwrap().to_str().unwrap();
        assert!(location.starts_with("https://127.0.0.1:"), "Location names the https URL: {location}");
        let appended = client.send("POST", &url, &[("content-type", "text/plain")], b"world".to_vec()).await.unwrap();
        assert_eq!((appended.status, appended.version), (204, version));
        let read = client.send("GET", &format!("{url}?offset=-1"), &[], Vec::new()).await.unwrap();
        assert_eq!((read.status, read.version, &read.body[..]), (200, version, &b"hello world"[..]));
    }
    // A client that does not trust the test CA is refused by TLS.
    let other = ds_testpki::generate().unwrap();
    let untrusting = TlsClient::new(&other.ca_pem, &[b"http/1.1"]).unwrap();
    assert!(untrusting.send("GET", &format!("{}/health", server.base), &[], Vec::new()).await.is_err());
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = ds_e2e::client().get(format!("http://{}/health", server.addr)).send().await;
    assert!(!plain.map(|r| r.status().is_success()).unwrap_or(false));
}

fn scrape_value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let scrape =
        prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("Prometheus text format");
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(b) => b.iter().map(|x| x.count).fold(0.0, f64::max),
            other => panic!("{name}: unexpected {other:?}"),
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_move_and_health_names_the_store() {
    let server = Server::start(ServerOpts { store: Store::Local, ..ServerOpts::default() }).await.unwrap();
    let client = ds_e2e::client();
    let metrics =
        || async { client.get(format!("{}/metrics", server.base)).send().await.unwrap().text().await.unwrap() };

    let health = client.get(format!("{}/health", server.base)).send().await.unwrap().text().await.unwrap();
    let health: serde_json::Value = serde_json::from_str(&health).unwrap();
    assert_eq!(health, serde_json::json!({"status": "ok", "store": "local", "writable": true}));

    let before = metrics().await;
    let appends = |t: &str| scrape_value(t, "ds_http_requests_total", &[("route", "stream_append"), ("status", "204")]);
    let url = server.url("metrics/a");
    client.put(&url).header("content-type", "text/plain").send().await.unwrap();
    for i in 0..5 {
        let r =
            client.post(&url).header("content-type", "text/plain").body(format!("record {i}")).send().await.unwrap();
        assert_eq!(r.status(), 204);
    }
    // A long-poll in flight is an open live reader.
    let poll = tokio::spawn({
        let c = client.clone();
        let u = format!("{url}?offset=now&live=long-poll");
        async move { c.get(u).send().await.map(|r| r.status().as_u16()) }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let during = metrics().await;
    assert_eq!(poll.await.unwrap().unwrap(), 204);
    let after = metrics().await;

    assert_eq!(appends(&during) - appends(&before), 5.0, "five appends counted");
    assert_eq!(scrape_value(&during, "ds_live_readers", &[("mode", "long-poll")]), 1.0);
    assert_eq!(scrape_value(&after, "ds_live_readers", &[("mode", "long-poll")]), 0.0);
    let bytes_in = scrape_value(&after, "ds_http_request_bytes_total", &[("route", "stream_append")])
        - scrape_value(&before, "ds_http_request_bytes_total", &[("route", "stream_append")]);
    assert_eq!(bytes_in, 5.0 * 8.0, "request bytes counted");
    assert!(scrape_value(&after, "ds_http_request_duration_seconds_count", &[("route", "stream_append")]) >= 5.0);
    assert!(
        scrape_value(&after, "ds_store_commit_batch_size_count", &[]) >= 6.0,
        "one create and five appends committed"
    );
    assert!(scrape_value(&after, "ds_store_fsync_seconds_count", &[]) >= 1.0);
    assert!(after.contains("ds_stream_contexts"));
}
