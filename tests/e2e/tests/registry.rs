//! The `__registry__` stream on the real server binary: access control
//! (a token limited to `chat/` learns no other path from it), writes
//! refused, and two servers on one AWS table creating and deleting at once
//! (as two Lambda instances would) without an entry lost or left behind.
//! The official client's view of it, across a crash of the local store,
//! is tests/cli-interop.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use ds_e2e::emulator::Emulator;
use ds_e2e::{client, Server, ServerOpts, Store};

/// The registry read whole through `base` (as `token`, if any), folded:
/// path → content type. Panics on a malformed change.
async fn fold(base: &str, token: Option<&str>) -> BTreeMap<String, String> {
    let mut state = BTreeMap::new();
    let mut offset = "-1".to_owned();
    loop {
        let mut req = client().get(format!("{base}/v1/stream/__registry__?offset={offset}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200, "reading the registry");
        let next = resp.headers()["stream-next-offset"].to_str().unwrap().to_owned();
        let up_to_date = resp.headers().contains_key("stream-up-to-date");
        let page: Vec<serde_json::Value> = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        for m in page {
            assert_eq!(m["type"], "stream", "{m}");
            let key = m["key"].as_str().unwrap().to_owned();
            match m["headers"]["operation"].as_str().unwrap() {
                "insert" => {
                    assert_eq!(m["value"]["path"], key.as_str(), "{m}");
                    assert!(m["value"]["createdAt"].is_i64(), "{m}");
                    let ct = m["value"]["contentType"].as_str().unwrap().to_owned();
                    assert!(state.insert(key, ct).is_none(), "inserted twice: {m}");
                }
                "update" => {
                    let ct = m["value"]["contentType"].as_str().unwrap().to_owned();
                    assert!(state.insert(key, ct).is_some(), "updated while not listed: {m}");
                }
                "delete" => assert!(state.remove(&key).is_some(), "deleted while not listed: {m}"),
                other => panic!("operation {other}: {m}"),
            }
        }
        if up_to_date {
            return state;
        }
        offset = next;
    }
}

async fn status(req: reqwest::RequestBuilder) -> u16 {
    req.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_limited_to_chat_reads_neither_the_registry_nor_other_paths_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let (root, chat) = (ds_auth::tokens::generate(), ds_auth::tokens::generate());
    let all = ["read", "write", "admin"];
    let tokens = serde_json::json!({ "tokens": [
        {"name": "root", "sha256": ds_auth::tokens::digest_hex(&root), "streams": [{"prefix": "", "ops": all}]},
        {"name": "chat", "sha256": ds_auth::tokens::digest_hex(&chat), "streams": [{"prefix": "chat/", "ops": all}]},
    ]});
    std::fs::write(dir.path().join("tokens.json"), tokens.to_string()).unwrap();
    let args = vec!["--auth-tokens-file".to_owned(), dir.path().join("tokens.json").display().to_string()];
    let s = Server::start(ServerOpts { extra_args: args, ..ServerOpts::default() }).await.unwrap();
    let c = client();
    assert_eq!(status(c.put(s.url("chat/room")).bearer_auth(&chat)).await, 201);
    assert_eq!(status(c.put(s.url("billing/secret-plan")).bearer_auth(&root)).await, 201);

    // The chat token may not read it (so cannot learn billing/… from it).
    let registry = s.url("__registry__");
    assert_eq!(status(c.get(format!("{registry}?offset=-1")).bearer_auth(&chat)).await, 403);
    assert_eq!(status(c.head(&registry).bearer_auth(&chat)).await, 403);
    let sse = c.get(format!("{registry}?offset=-1&live=sse")).bearer_auth(&chat);
    assert_eq!(status(sse).await, 403);
    // A grant covering it does: every path is listed.
    let listed = fold(&s.base, Some(&root)).await;
    let paths: Vec<&str> = listed.keys().map(String::as_str).collect();
    assert_eq!(paths, ["billing/secret-plan", "chat/room"]);

    // Nobody writes it, whatever their grants: 403 with the reason.
    for (method, body) in [("PUT", ""), ("POST", "[{}]"), ("DELETE", "")] {
        let req = c.request(method.parse().unwrap(), &registry).bearer_auth(&root);
        let resp = req.header("content-type", "application/json").body(body).send().await.unwrap();
        assert_eq!(resp.status(), 403, "{method}");
        let text = resp.text().await.unwrap();
        assert!(text.contains("RESERVED_STREAM") && text.contains("written by the server"), "{method}: {text}");
    }
    let fork = c.put(s.url("chat/copy")).bearer_auth(&root).header("stream-forked-from", "__registry__");
    assert_eq!(status(fork).await, 403, "the registry cannot be forked");
    assert_eq!(fold(&s.base, Some(&root)).await, listed, "refused writes left it as it was");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_registry_off_the_path_is_an_ordinary_stream() {
    let args = vec!["--registry".to_owned(), "off".to_owned()];
    let s = Server::start(ServerOpts { extra_args: args, ..ServerOpts::default() }).await.unwrap();
    let c = client();
    assert_eq!(status(c.put(s.url("a"))).await, 201);
    assert_eq!(status(c.head(s.url("__registry__"))).await, 404, "nothing keeps it");
    let create = c.put(s.url("__registry__")).header("content-type", "application/json");
    assert_eq!(status(create).await, 201, "a client may use the path");
}

/// Two servers over one table, each creating 40 streams and deleting every
/// third, all at once: both fold the registry to exactly the streams that
/// exist, each create and delete listed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_servers_on_one_aws_table_create_and_delete_at_once() {
    let Some(emulator) = Emulator::start_or_skip("two servers on one AWS table") else { return };
    let opts = || ServerOpts { store: Store::Aws, env: emulator.env.clone(), ..ServerOpts::default() };
    let servers = [Server::start(opts()).await.unwrap(), Server::start(opts()).await.unwrap()];
    let mut tasks = Vec::new();
    for (n, s) in servers.iter().enumerate() {
        for w in 0..4 {
            let base = s.base.clone();
            tasks.push(tokio::spawn(async move {
                let c = client();
                let mut created = Vec::new();
                for i in 0..10 {
                    let path = format!("race/s{n}-w{w}-{i}");
                    let put = c.put(format!("{base}/v1/stream/{path}")).header("content-type", "text/plain");
                    assert_eq!(status(put).await, 201, "create {path}");
                    if i % 3 == 0 {
                        assert_eq!(status(c.delete(format!("{base}/v1/stream/{path}"))).await, 204, "delete {path}");
                    } else {
                        created.push(path);
                    }
                }
                created
            }));
        }
    }
    let mut expected = BTreeSet::new();
    for t in tasks {
        expected.extend(t.await.unwrap());
    }
    assert_eq!(expected.len(), 2 * 4 * 6);
    for s in &servers {
        let listed = fold(&s.base, None).await;
        assert_eq!(listed.keys().cloned().collect::<BTreeSet<_>>(), expected, "as {} folds it", s.base);
        assert!(listed.values().all(|ct| ct == "text/plain"));
    }
}
