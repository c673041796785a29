//! The checker on a real history: clients against the local-store server
//! (no faults) give a history that passes; each anomaly planted into it
//! (in the final state or in an answer) is then flagged.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use ds_e2e::record::encode;
use ds_history::campaign::{read_finals, with_faults};
use ds_history::check::{check, Finals, Kind};
use ds_history::client::{Servers, Shared};
use ds_history::history::{Answer, Call, History, Op, Outcome, RecordKey};
use ds_history::workload::Settings;

fn kinds(history: &History, finals: &Finals) -> Vec<Kind> {
    let checked = check(history, finals);
    if let Some(v) = checked.first() {
        eprintln!("{} violation(s); first: {}", checked.violations.len(), v.render(history));
    }
    checked.violations.iter().map(|v| v.kind).collect()
}

fn record(op: &Op) -> Option<(&str, RecordKey)> {
    match (&op.call, &op.outcome) {
        (Call::Append { stream, record, .. }, Outcome::Ok(Answer::Appended { .. })) => Some((stream, *record)),
        _ => None,
    }
}

fn find(bytes: &[u8], k: RecordKey) -> usize {
    let r = encode(k.writer, k.seq);
    bytes.windows(r.len()).position(|w| w == r).expect("the record is in the final stream")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_history_passes_and_planted_anomalies_fail_it() {
    let server = ds_e2e::Server::start(ds_e2e::ServerOpts {
        extra_args: vec!["--max-read-bytes".into(), "4096".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let route = Arc::new(Servers(vec![server.base.clone()]));
    let shared = Arc::new(Shared::new(route.clone(), Duration::from_secs(10)));
    let settings = Settings { clients: 6, ops: 1500, slots: 2, rotate_after: 80, prefix: "real".into(), seed: 7 };
    with_faults(&shared, settings, |_| async { Ok(()) }).await.unwrap();
    let history = shared.recorder.history();
    let read = read_finals(route.as_ref(), &history).await;
    assert!(read.unreadable.is_empty(), "{:?}", read.unreadable);
    let finals = read.finals;
    let checked = check(&history, &finals);
    assert!(checked.ok(), "{}", checked.first().unwrap().render(&history));
    eprintln!("real history: {:?}", checked.summary);
    assert!(checked.summary.ops >= 1500 && checked.summary.segments > 100);

    // Two acknowledged appends to one stream, the first acknowledged
    // before the second was invoked, next to each other in the final stream.
    let acked: Vec<&Op> = history.ops.iter().filter(|o| record(o).is_some()).collect();
    let (a, b) = acked
        .iter()
        .flat_map(|a| acked.iter().map(move |b| (*a, *b)))
        .find(|(a, b)| {
            let ((sa, ka), (sb, kb)) = (record(a).unwrap(), record(b).unwrap());
            let bytes = &finals[sa].bytes;
            sa == sb && a.complete < b.invoke && find(bytes, ka) + encode(ka.writer, ka.seq).len() == find(bytes, kb)
        })
        .unwrap();
    let ((stream, ka), (_, kb)) = (record(a).unwrap(), record(b).unwrap());
    let (ra, rb) = (encode(ka.writer, ka.seq), encode(kb.writer, kb.seq));
    let at = find(&finals[stream].bytes, ka);

    let mut lost = finals.clone();
    lost.get_mut(stream).unwrap().bytes.drain(at..at + ra.len());
    assert!(kinds(&history, &lost).contains(&Kind::LostAppend));

    let mut duplicated = finals.clone();
    duplicated.get_mut(stream).unwrap().bytes.splice(at..at, ra.clone());
    assert!(kinds(&history, &duplicated).contains(&Kind::Duplicate));

    let mut reordered = finals.clone();
    let swapped = [rb.clone(), ra.clone()].concat();
    reordered.get_mut(stream).unwrap().bytes.splice(at..at + ra.len() + rb.len(), swapped);
    assert!(kinds(&history, &reordered).contains(&Kind::RealTimeOrder));

    // A record some read returned, gone from the final stream.
    let (read_stream, read_key) = history
        .ops
        .iter()
        .find_map(|o| match (&o.call, &o.outcome) {
            (Call::Read { stream, .. }, Outcome::Ok(Answer::Read { segments })) => {
                segments.iter().flat_map(|s| &s.records).next().map(|(k, _)| (stream.as_str(), *k))
            }
            _ => None,
        })
        .unwrap();
    let mut absent = finals.clone();
    let r = encode(read_key.writer, read_key.seq);
    let at = find(&absent[read_stream].bytes, read_key);
    absent.get_mut(read_stream).unwrap().bytes.drain(at..at + r.len());
    assert!(kinds(&history, &absent).contains(&Kind::DirtyRead));

    // A client's later HEAD reports a tail below one it saw before.
    let mut backwards = history.clone();
    let later = backwards
        .ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Ok(Answer::Head { tail, .. }) if tail > 0))
        .find_map(|first| {
            history.ops.iter().find(|o| {
                o.client == first.client
                    && o.call == first.call
                    && o.invoke > first.complete
                    && matches!(o.outcome, Outcome::Ok(Answer::Head { .. }))
            })
        })
        .map(|o| o.id)
        .unwrap();
    backwards.ops[later].outcome = Outcome::Ok(Answer::Head { tail: 0, closed: false });
    assert!(kinds(&backwards, &finals).contains(&Kind::NonMonotonicRead));
}
