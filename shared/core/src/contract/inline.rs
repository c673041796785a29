//! Inline processors, seen through the service on each substrate: a refused
//! append leaves no trace (stream, producer state, reduction); an accepted
//! one commits with its reduction, all or nothing, also with many writers
//! over two processes; a reducer-version change refolds once; a refold that
//! fails refuses appends naming the processor until an operator resets or
//! skips it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use ds_protocol::headers::ProducerHeaders;
use serde_json::Value;

use super::fixtures::unique_path;
use super::SubstrateFactory;
use crate::inline::{InlineGate, InlineMessage, InlineProcessor, InlineRefusal};
use crate::{AppendOutcome, InlineControl, ServiceConfig, ServiceError, StreamService};

/// Sums `{"n": int}` messages: refuses a negative `n` (and anything else
/// that is not such a message); its fold (a refold) fails on `{"n": -999}`,
/// which only a skipped stream can hold. `scale` is part of the reducer
/// version: a processor of another scale refolds.
pub struct Summer {
    slug: String,
    version: String,
    scale: i64,
    stateful: bool,
    /// Messages folded by [`InlineProcessor::fold`] (refolds).
    pub refolded: AtomicU64,
    pub rejected: AtomicU64,
}

impl Summer {
    pub fn new(slug: &str, scale: i64) -> Arc<Self> {
        Arc::new(Self {
            slug: slug.to_owned(),
            version: format!("sum-x{scale}"),
            scale,
            stateful: true,
            refolded: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    /// A validation-only variant (keeps no state).
    pub fn stateless(slug: &str) -> Arc<Self> {
        let mut s = Arc::into_inner(Self::new(slug, 1)).expect("fresh");
        s.stateful = false;
        Arc::new(s)
    }

    fn n(m: &InlineMessage<'_>) -> Result<i64, String> {
        let v: Value = serde_json::from_slice(m.data).map_err(|e| e.to_string())?;
        v.get("n").and_then(Value::as_i64).ok_or_else(|| "no integer \"n\"".to_owned())
    }

    fn add(&self, state: &[u8], messages: &[InlineMessage<'_>], check: bool) -> Result<Bytes, InlineRefusal> {
        let mut sum: [i64; 2] = serde_json::from_slice(state).map_err(|e| refusal(0, e.to_string()))?;
        for m in messages {
            let n = Self::n(m).map_err(|r| refusal(m.position, r))?;
            if (check && n < 0) || (!check && n == -999) {
                return Err(refusal(m.position, format!("n = {n} is negative")));
            }
            sum[0] += n * self.scale;
            sum[1] += 1;
        }
        Ok(Bytes::from(serde_json::to_vec(&sum).map_err(|e| refusal(0, e.to_string()))?))
    }
}

fn refusal(position: u64, reason: String) -> InlineRefusal {
    InlineRefusal { position, reason }
}

impl InlineProcessor for Summer {
    fn slug(&self) -> &str {
        &self.slug
    }
    fn reducer_version(&self) -> &str {
        &self.version
    }
    fn initial_state(&self) -> Option<Bytes> {
        self.stateful.then(|| Bytes::from_static(b"[0,0]"))
    }
    fn admit(&self, state: Option<&[u8]>, messages: &[InlineMessage<'_>]) -> Result<Option<Bytes>, InlineRefusal> {
        match state {
            Some(state) => self.add(state, messages, true).map(Some),
            None => self.add(b"[0,0]", messages, true).map(|_| None),
        }
    }
    fn fold(&self, state: &[u8], messages: &[InlineMessage<'_>]) -> Result<Bytes, String> {
        self.refolded.fetch_add(messages.len() as u64, Ordering::SeqCst);
        self.add(state, messages, false).map_err(|r| r.reason)
    }
    fn rejected(&self, _path: &str, _refusal: &InlineRefusal) {
        self.rejected.fetch_add(1, Ordering::SeqCst);
    }
}

/// A gate binding its processors to every stream.
pub struct AllStreams(pub Vec<Arc<Summer>>);

impl InlineGate for AllStreams {
    fn bound(&self, _path: &str) -> Vec<Arc<dyn InlineProcessor>> {
        self.0.iter().map(|p| Arc::clone(p) as Arc<dyn InlineProcessor>).collect()
    }
    fn processor(&self, slug: &str) -> Option<Arc<dyn InlineProcessor>> {
        self.0.iter().find(|p| p.slug == slug).map(|p| Arc::clone(p) as Arc<dyn InlineProcessor>)
    }
}

async fn service(f: &dyn SubstrateFactory, processors: Vec<Arc<Summer>>) -> StreamService {
    let svc = StreamService::new(f.instance().await, ServiceConfig::default());
    assert!(svc.set_inline_gate(Arc::new(AllStreams(processors))));
    svc
}

async fn create_json(svc: &StreamService, path: &str) {
    let mut req = super::fixtures::create_request(path);
    req.content_type = Some("application/json".into());
    svc.create(req).await.expect("create");
}

fn append(path: &str, body: &str, producer: Option<(&str, u64)>) -> crate::AppendRequest<'static> {
    let mut req = super::fixtures::append_request(path, Bytes::from(body.to_owned()));
    req.content_type = Some("application/json".into());
    req.producer = producer.map(|(id, seq)| ProducerHeaders { id: id.to_owned(), epoch: 0, seq });
    req
}

/// `[sum, count]` of the stored reduction, and where it is folded through.
async fn reduction(svc: &StreamService, slug: &str, path: &str) -> Option<([i64; 2], u64, u64)> {
    let view = svc.inline_view(slug, path).await.expect("view");
    view.reduction.map(|r| {
        let sum = serde_json::from_slice(&r.state).expect("state");
        (sum, r.reduced_through, view.meta.tail)
    })
}

async fn whole(svc: &StreamService, path: &str) -> Vec<i64> {
    let mut out = Vec::new();
    let mut offset = ds_protocol::ReadOffset::Beginning;
    loop {
        let read = svc
            .read(crate::ReadRequest { path: path.to_owned(), offset: Some(offset), live: crate::LiveMode::None })
            .await
            .expect("read");
        let values: Vec<Value> = serde_json::from_slice(&read.body).expect("a JSON array");
        out.extend(values.iter().map(|v| v["n"].as_i64().expect("n")));
        if read.up_to_date {
            return out;
        }
        offset = ds_protocol::ReadOffset::At(ds_protocol::Offset(read.next));
    }
}

/// A refused append writes nothing: same tail, same bytes, same reduction,
/// and the producer's sequence number is still free for a corrected event.
pub async fn inline_rejection_leaves_no_trace(f: &dyn SubstrateFactory) {
    let summer = Summer::new("sum", 1);
    let checker = Summer::stateless("check");
    let svc = service(f, vec![Arc::clone(&summer), Arc::clone(&checker)]).await;
    let path = unique_path("inline-refuse");
    create_json(&svc, &path).await;
    svc.append(append(&path, r#"[{"n":1},{"n":2}]"#, Some(("p", 0)))).await.expect("valid");
    let before = reduction(&svc, "sum", &path).await;
    assert_eq!(before.map(|r| r.0), Some([3, 2]));
    let refused = svc.append(append(&path, r#"[{"n":3},{"n":-1}]"#, Some(("p", 1)))).await;
    match refused {
        Err(ServiceError::InlineRejected { processor, position, reason }) => {
            assert_eq!(processor, "sum", "the first bound processor refuses");
            assert!(reason.contains("negative"), "{reason}");
            let tail = before.expect("reduction").2;
            assert!(position > tail, "the refused message's would-be position {position} lies past {tail}");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(summer.rejected.load(Ordering::SeqCst), 1, "reported once");
    assert_eq!(reduction(&svc, "sum", &path).await, before, "reduction and tail untouched");
    assert_eq!(whole(&svc, &path).await, vec![1, 2], "no byte of the refused append");
    assert_eq!(reduction(&svc, "check", &path).await, None, "a stateless processor stores nothing");
    let retried = svc.append(append(&path, r#"[{"n":3}]"#, Some(("p", 1)))).await.expect("corrected retry");
    assert!(matches!(retried, AppendOutcome::Appended { .. }), "seq 1 was still free: {retried:?}");
    let after = reduction(&svc, "sum", &path).await.expect("reduction");
    assert_eq!(after.0, [6, 3]);
    assert_eq!(after.1, after.2, "folded through the tail");
}

/// Many writers over two processes: at every moment the stored reduction
/// is folded through the tail or past it (never an append without its
/// reduction), and at the end it is exactly the fold of the stream.
pub async fn inline_reduction_commits_with_its_append(f: &dyn SubstrateFactory) {
    const WRITERS: usize = 16;
    const EACH: i64 = 5;
    let services = [service(f, vec![Summer::new("sum", 1)]).await, service(f, vec![Summer::new("sum", 1)]).await];
    let path = unique_path("inline-atomic");
    create_json(&services[0], &path).await;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let observer = {
        let (svc, path, done) = (services[1].clone(), path.clone(), Arc::clone(&done));
        tokio::spawn(async move {
            let mut samples = 0;
            while !done.load(Ordering::SeqCst) {
                if let Some((_, through, tail)) = reduction(&svc, "sum", &path).await {
                    assert!(through >= tail, "an append at {tail} is visible without its reduction ({through})");
                    samples += 1;
                }
                tokio::task::yield_now().await;
            }
            samples
        })
    };
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (svc, path) = (services[w % 2].clone(), path.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..EACH {
                let body = format!(r#"[{{"n":{}}}]"#, w as i64 * 100 + i);
                svc.append(append(&path, &body, None)).await.expect("a valid append is applied");
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer");
    }
    done.store(true, Ordering::SeqCst);
    let samples = observer.await.expect("observer");
    assert!(samples > 0, "the observer saw the reduction");
    let values = whole(&services[0], &path).await;
    assert_eq!(values.len(), WRITERS * EACH as usize);
    let (sum, through, tail) = reduction(&services[1], "sum", &path).await.expect("reduction");
    assert_eq!(sum, [values.iter().sum::<i64>(), values.len() as i64], "the reduction is the stream's fold");
    assert_eq!(through, tail);
}

/// A processor of another reducer version refolds the stream once, on its
/// first append; the next append folds only itself.
pub async fn inline_refolds_once_on_a_new_version(f: &dyn SubstrateFactory) {
    let v1 = service(f, vec![Summer::new("sum", 1)]).await;
    let path = unique_path("inline-refold");
    create_json(&v1, &path).await;
    for n in 1..=4 {
        v1.append(append(&path, &format!(r#"{{"n":{n}}}"#), None)).await.expect("append");
    }
    let doubled = Summer::new("sum", 2);
    let v2 = service(f, vec![Arc::clone(&doubled)]).await;
    v2.append(append(&path, r#"{"n":5}"#, None)).await.expect("append after the version change");
    assert_eq!(doubled.refolded.load(Ordering::SeqCst), 4, "the four older messages refolded once");
    v2.append(append(&path, r#"{"n":6}"#, None)).await.expect("append");
    assert_eq!(doubled.refolded.load(Ordering::SeqCst), 4, "no second refold");
    let (sum, through, tail) = reduction(&v2, "sum", &path).await.expect("reduction");
    assert_eq!(sum, [2 * 21, 6], "every message folded at the new version once");
    assert_eq!(through, tail);

    // A fork inherits the history, not the record: its first append folds
    // what it inherited (read through the source), then itself.
    let fork = format!("{path}-fork");
    let mut req = super::fixtures::create_request(&fork);
    req.content_type = Some("application/json".into());
    req.fork = Some(crate::ForkRequest { source: path.clone(), offset: None, sub_offset: 0 });
    v2.create(req).await.expect("fork");
    v2.append(append(&fork, r#"{"n":100}"#, None)).await.expect("append to the fork");
    assert_eq!(doubled.refolded.load(Ordering::SeqCst), 4 + 6, "the fork refolded its six inherited messages");
    let (sum, through, tail) = reduction(&v2, "sum", &fork).await.expect("the fork's reduction");
    assert_eq!((sum, through), ([2 * 121, 7], tail));
    assert_eq!(reduction(&v2, "sum", &path).await.map(|r| r.0), Some([42, 6]), "the source's is its own");
}

/// A refold that fails refuses appends with an error naming the processor
/// (the stream is not bricked: reads go on), a reset lets them in again, and
/// a skip lets a refused event pass unchecked until the next reset.
pub async fn inline_failed_refold_waits_for_an_operator(f: &dyn SubstrateFactory) {
    let v1 = service(f, vec![Summer::new("sum", 1)]).await;
    let path = unique_path("inline-brick");
    create_json(&v1, &path).await;
    v1.append(append(&path, r#"{"n":1}"#, None)).await.expect("append");
    let summer: Arc<dyn InlineProcessor> = Summer::new("sum", 1);
    v1.inline_control(summer.as_ref(), &path, InlineControl::Skip { reason: "test".into() }).await.expect("skip");
    v1.append(append(&path, r#"{"n":-999}"#, None)).await.expect("a skipped processor checks nothing");
    v1.inline_control(summer.as_ref(), &path, InlineControl::Reset).await.expect("reset");
    v1.append(append(&path, r#"{"n":2}"#, None)).await.expect("checked again after the reset");
    assert!(v1.append(append(&path, r#"{"n":-1}"#, None)).await.is_err(), "checked again after the reset");
    assert_eq!(reduction(&v1, "sum", &path).await.map(|r| r.0), Some([2, 1]), "reset at the tail, then 2");

    // Another version must refold the history, which holds -999: it fails.
    let tripled = Summer::new("sum", 3);
    let v2 = service(f, vec![Arc::clone(&tripled)]).await;
    match v2.append(append(&path, r#"{"n":3}"#, None)).await {
        Err(ServiceError::InlineUnavailable { processor, reason }) => {
            assert_eq!(processor, "sum");
            assert!(reason.contains("refold"), "{reason}");
        }
        other => panic!("expected the processor to be unavailable, got {other:?}"),
    }
    assert_eq!(whole(&v2, &path).await, vec![1, -999, 2], "reads go on, nothing appended");
    let re_reduce = v2.inline_control(tripled.as_ref(), &path, InlineControl::ReReduce).await;
    assert!(matches!(re_reduce, Err(ServiceError::InlineUnavailable { .. })), "a re-reduce meets the same history");
    v2.inline_control(tripled.as_ref(), &path, InlineControl::Reset).await.expect("reset");
    v2.append(append(&path, r#"{"n":3}"#, None)).await.expect("appends again after the reset");
    let (sum, through, tail) = reduction(&v2, "sum", &path).await.expect("reduction");
    assert_eq!((sum, through), ([9, 1], tail), "from the reset on, at the new version");
}
