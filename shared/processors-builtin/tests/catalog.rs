//! A configuration is checked against the catalog and the store before a
//! host starts: every mistake names the processor and the field.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bytes::Bytes;
use ds_core::{CreateRequest, ServiceConfig, StreamService};
use ds_processor_host::Spec;
use ds_processors_builtin::{Catalog, ConfigError};

fn service() -> StreamService {
    let (substrate, _due) = ds_store_memory::memory_substrate();
    StreamService::new(substrate, ServiceConfig::default())
}

async fn create(svc: &StreamService, path: &str, content_type: &str) {
    let req = CreateRequest {
        path: path.into(),
        content_type: Some(content_type.into()),
        lifetime: Default::default(),
        closed: false,
        body: Bytes::new(),
        fork: None,
    };
    svc.create(req).await.unwrap();
}

async fn error(svc: &StreamService, toml: &str) -> String {
    match Catalog::builtin().load(toml, svc).await {
        Ok(_) => panic!("accepted:\n{toml}"),
        Err(e) => e.to_string(),
    }
}

fn outbox(extra: &str) -> String {
    format!("[[processor]]\nkind = \"outbox\"\nslug = \"o\"\nstreams = \"orders/*\"\n{extra}\n")
}

#[tokio::test]
async fn mistakes_name_the_processor_and_the_field() {
    let svc = service();
    create(&svc, "feed", "application/json").await;
    create(&svc, "text", "text/plain").await;
    let cases = [
        (
            "[[processor]]\nkind = \"outbx\"\nslug = \"o\"\nstreams = \"a\"".to_owned(),
            "processor #1 (\"o\"): field `kind`: unknown processor kind \"outbx\" (known: counter, json-schema, outbox, state)",
        ),
        (
            "[[processor]]\nkind = \"counter\"\nslug = \"c\"\nstreams = \"orders/x*\"".to_owned(),
            "processor #1 (\"c\"): field `streams`: ",
        ),
        (
            "[[processor]]\nkind = \"state\"\nslug = \"s\"\nstreams = \"a\"\nmax_rows = 0".to_owned(),
            "processor #1 (\"s\"): field `max_rows`: ",
        ),
        (
            "[[processor]]\nkind = \"state\"\nslug = \"s\"\nstreams = \"a\"\nmax_row = 5".to_owned(),
            "processor #1 (\"s\"): field `max_row`",
        ),
        (outbox("target = \"nowhere\""), "processor #1 (\"o\"): field `target`: stream \"nowhere\" does not exist"),
        (
            outbox("target = \"text\""),
            "processor #1 (\"o\"): field `target`: stream \"text\" is \"text/plain\", not an application/json stream",
        ),
        (
            outbox("target = \"orders/out\""),
            "processor #1 (\"o\"): field `target`: \"orders/out\" matches the outbox's own streams",
        ),
        (outbox("target = \"feed\"\ntargett = 1"), "processor #1 (\"o\"): field `targett`: unknown field"),
        (outbox("target = 3"), "processor #1 (\"o\"): field `target`: expected a string, found 3"),
        (
            outbox("target = \"feed\"\ntemplate = { id = \"$payload\" }"),
            "processor #1 (\"o\"): field `template`: at \"/id\"",
        ),
        (outbox("target = \"feed\"\nconsumes = []"), "processor #1 (\"o\"): field `consumes`: an empty list"),
        (
            format!("{}{}", outbox("target = \"feed\""), outbox("target = \"feed\"").replace("orders/*", "more/*")),
            "processor #2 (\"o\"): field `slug`: \"o\" is used twice",
        ),
        (
            "[[processor]]\nkind = \"counter\"\nslug = \"c\"\nstreams = \"a\"\ngroup_by = \"payload/x\"".to_owned(),
            "processor #1 (\"c\"): field `group_by`: \"payload/x\" is not a JSON pointer",
        ),
    ];
    let inline = [
        (
            outbox("target = \"feed\"\ninline = true"),
            "processor #1 (\"o\"): field `inline`: kind \"outbox\" cannot run inline",
        ),
        (
            "[[processor]]\nkind = \"json-schema\"\nslug = \"j\"\nstreams = \"a\"\ninline = false\nschemas.t = '{}'"
                .to_owned(),
            "processor #1 (\"j\"): field `inline`: kind \"json-schema\" runs only inline",
        ),
        (
            "[[processor]]\nkind = \"counter\"\nslug = \"c\"\nstreams = \"a\"\ninline = true\ncheckpoint = \"idle\""
                .to_owned(),
            "processor #1 (\"c\"): field `checkpoint`: an inline processor has no checkpoint",
        ),
    ];
    for (toml, want) in cases.into_iter().chain(inline) {
        let got = error(&svc, &toml).await;
        assert!(got.starts_with(want), "config:\n{toml}\nwant: {want}\ngot:  {got}");
    }
}

#[tokio::test]
async fn create_target_makes_a_json_stream_and_a_valid_config_registers_every_processor() {
    let svc = service();
    let toml = format!(
        "{}\n[[processor]]\nkind = \"counter\"\nslug = \"c\"\nstreams = \"orders/**\"\ngroup_by = \"/payload/status\"",
        outbox("target = \"feed\"\ncreate_target = true\ntemplate = { type = \"x\", payload = \"$/payload\" }")
    );
    let (config, registry) = Catalog::builtin().load(&toml, &svc).await.unwrap();
    assert_eq!(config.processors.len(), 2);
    assert_eq!(registry.for_path("orders/1").len(), 2);
    assert_eq!(registry.for_path("orders/1/2").len(), 1, "only the counter's ** matches deeper paths");
    let feed = svc.head("feed").await.unwrap();
    assert_eq!(&*feed.content_type, "application/json");
}

#[tokio::test]
async fn a_custom_kind_is_registered_next_to_the_built_in_ones() {
    let svc = service();
    let catalog = Catalog::builtin().with_kind_fn("tally", |def, _svc| {
        def.options.finish(&[])?;
        // The example counter's contract names it "counter", whatever the config says.
        Ok(Arc::new(Spec::new(ds_processor_examples::counter)))
    });
    assert_eq!(catalog.kinds(), ["counter", "json-schema", "outbox", "state", "tally"]);
    let err = catalog.load("[[processor]]\nkind = \"tally\"\nslug = \"t\"\nstreams = \"a\"", &svc).await;
    assert!(matches!(&err, Err(ConfigError::Field { field, .. }) if field == "slug"), "{:?}", err.err());
    let ok = catalog.load("[[processor]]\nkind = \"tally\"\nslug = \"counter\"\nstreams = \"a\"", &svc).await;
    assert!(ok.is_ok(), "{:?}", ok.err());
}

/// The runner crate's example processor (feature `test-util`).
mod ds_processor_examples {
    pub fn counter() -> ds_processor_testkit::examples::Counter {
        ds_processor_testkit::examples::Counter::new()
    }
}

/// Inline processors go to the inline registry (the append path), the rest
/// to the hosted one: a processor runs in exactly one of them.
#[tokio::test]
async fn inline_processors_are_built_apart_from_hosted_ones() {
    let svc = service();
    let toml = "[[processor]]\nkind = \"counter\"\nslug = \"hosted\"\nstreams = \"orders/*\"\n\
                [[processor]]\nkind = \"counter\"\nslug = \"inline\"\nstreams = \"orders/*\"\ninline = true\n\
                [[processor]]\nkind = \"json-schema\"\nslug = \"schema\"\nstreams = \"orders/*\"\n\
                schemas.placed = '{\"type\":\"object\"}'";
    let catalog = Catalog::builtin();
    let (config, hosted) = catalog.load(toml, &svc).await.unwrap();
    let inline = catalog.build_inline(&config).unwrap();
    let hosted: Vec<_> = hosted.for_path("orders/1").iter().map(|r| r.slug().to_owned()).collect();
    assert_eq!(hosted, ["hosted"]);
    let bound: Vec<_> = ds_core::InlineGate::bound(&inline, "orders/1").iter().map(|p| p.slug().to_owned()).collect();
    assert_eq!(bound, ["inline", "schema"]);
    assert!(ds_core::InlineGate::bound(&inline, "other/1").is_empty());
    let schema = inline.hosted("schema").unwrap();
    assert!(schema.processor().initial_state().is_none(), "json-schema keeps no state");
    assert!(inline.hosted("inline").unwrap().processor().initial_state().is_some(), "the counter does");
}
