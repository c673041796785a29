#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::json;

use super::*;

fn change(op: &str, t: &str, k: &str, v: Option<Value>) -> Vec<u8> {
    let mut m = json!({ "type": t, "key": k, "headers": { "operation": op } });
    if let Some(v) = v {
        m["value"] = v;
    }
    m.to_string().into_bytes()
}

fn control(c: &str) -> Vec<u8> {
    json!({ "headers": { "control": c, "offset": "12_34" } }).to_string().into_bytes()
}

#[test]
fn the_spec_operations_fold_as_documented() {
    let mut s = Materialized::new();
    s.apply(1, &change("insert", "user", "1", Some(json!({"n": "a"})))).unwrap();
    s.apply(2, &change("insert", "user", "1", Some(json!({"n": "b"})))).unwrap();
    assert_eq!(s.get("user", "1"), Some(&json!({"n": "b"})), "insert over a row replaces it");
    s.apply(3, &change("update", "user", "2", Some(json!(2)))).unwrap();
    assert_eq!(s.get("user", "2"), Some(&json!(2)), "update of a missing row stores it");
    s.apply(4, &change("upsert", "team", "x", Some(Value::Null))).unwrap();
    assert_eq!(s.get("team", "x"), Some(&Value::Null), "a null value is a value");
    s.apply(5, &change("delete", "user", "missing", None)).unwrap();
    s.apply(6, &change("delete", "user", "2", Some(Value::Null))).unwrap();
    assert_eq!(s.get("user", "2"), None);
    assert_eq!(s.rows(), 2);
    assert_eq!(s.bytes(), "user1{\"n\":\"b\"}".len() + "teamxnull".len());
    s.apply(7, &control("snapshot-start")).unwrap();
    assert_eq!(s.rows(), 2, "a snapshot-start clears nothing");
    s.apply(8, &control("snapshot-end")).unwrap();
    s.apply(9, &control("reset")).unwrap();
    assert_eq!((s.rows(), s.bytes(), s.to_json()), (0, 0, json!({})));
    assert_eq!(s.malformed().count, 0);
}

#[test]
fn malformed_messages_are_reported_with_their_offset_and_never_folded() {
    let cases: Vec<(Vec<u8>, Malformed)> = vec![
        (b"{not json".to_vec(), Malformed::NotJson(String::new())),
        (b"[1]".to_vec(), Malformed::NotAnObject),
        (br#"{"type":"u","key":"1","value":1}"#.to_vec(), Malformed::NoHeaders),
        (br#"{"headers":{}}"#.to_vec(), Malformed::NeitherChangeNorControl),
        (br#"{"headers":{"operation":"insert","control":"reset"}}"#.to_vec(), Malformed::BothChangeAndControl),
        (change("merge", "u", "1", Some(json!(1))), Malformed::UnknownOperation("\"merge\"".into())),
        (control("rewind"), Malformed::UnknownControl("\"rewind\"".into())),
        (change("insert", "", "1", Some(json!(1))), Malformed::BadField("type")),
        (br#"{"type":"u","value":1,"headers":{"operation":"insert"}}"#.to_vec(), Malformed::BadField("key")),
        (change("update", "u", "1", None), Malformed::MissingValue("update")),
        (
            br#"{"type":"u","key":"1","value":1,"headers":{"operation":"insert","txid":""}}"#.to_vec(),
            Malformed::BadField("headers.txid"),
        ),
    ];
    let mut s = Materialized::new();
    s.apply(1, &change("insert", "u", "1", Some(json!(0)))).unwrap();
    for (i, (data, expected)) in cases.iter().enumerate() {
        let offset = 10 + i as u64;
        let err = s.apply(offset, data).unwrap_err();
        match expected {
            Malformed::NotJson(_) => assert!(matches!(err, Malformed::NotJson(_))),
            other => assert_eq!(&err, other),
        }
        assert_eq!(s.malformed().last.as_ref().unwrap().offset, offset);
    }
    assert_eq!(s.malformed().count, cases.len() as u64);
    assert_eq!(s.to_json(), json!({"u": {"1": 0}}), "nothing malformed was folded");
}

#[test]
fn a_type_is_paged_by_key() {
    let mut s = Materialized::new();
    for k in ["c", "a", "b"] {
        s.apply(1, &change("insert", "t", k, Some(json!(k)))).unwrap();
    }
    let keys: Vec<&str> = s.rows_after("t", Some("a")).map(|(k, _)| k).collect();
    assert_eq!(keys, ["b", "c"]);
    assert_eq!(s.rows_after("none", None).count(), 0);
    assert_eq!(s.types().collect::<Vec<_>>(), [("t", 3)]);
}

/// One generated message.
#[derive(Debug, Clone)]
enum Op {
    Change(&'static str, String, String, Option<Value>),
    Control(&'static str),
    Garbage,
}

impl Op {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Op::Change(op, t, k, v) => change(op, t, k, v.clone()),
            Op::Control(c) => control(c),
            Op::Garbage => br#"{"type":"t0","key":"k0","headers":{"operation":"insert"}}"#.to_vec(),
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    let t = prop::sample::select(vec!["t0", "t1", "t2"]).prop_map(str::to_owned);
    let k = (0u8..6).prop_map(|k| format!("k{k}"));
    let v = prop_oneof![
        Just(Value::Null),
        any::<i32>().prop_map(|n| json!(n)),
        "[a-z]{0,8}".prop_map(|s| json!({ "s": s }))
    ];
    prop_oneof![
        8 => (prop::sample::select(vec!["insert", "update", "upsert"]), t.clone(), k.clone(), v)
            .prop_map(|(op, t, k, v)| Op::Change(op, t, k, Some(v))),
        4 => (t, k).prop_map(|(t, k)| Op::Change("delete", t, k, None)),
        1 => prop::sample::select(vec!["reset", "snapshot-start", "snapshot-end"]).prop_map(Op::Control),
        1 => Just(Op::Garbage),
    ]
}

/// The reference: the spec's rules over a flat map, written as plainly as
/// possible.
fn model(ops: &[Op]) -> (BTreeMap<(String, String), Value>, u64) {
    let (mut rows, mut malformed) = (BTreeMap::new(), 0);
    for op in ops {
        match op {
            Op::Change("delete", t, k, _) => {
                rows.remove(&(t.clone(), k.clone()));
            }
            Op::Change(_, t, k, v) => {
                rows.insert((t.clone(), k.clone()), v.clone().unwrap());
            }
            Op::Control("reset") => rows.clear(),
            Op::Control(_) => {}
            Op::Garbage => malformed += 1,
        }
    }
    (rows, malformed)
}

fn fold(state: &mut Materialized, ops: &[Op]) {
    for (i, op) in ops.iter().enumerate() {
        let _ = state.apply(i as u64 + 1, &op.bytes());
    }
}

/// The live state re-sent as inserts: what a compacted history would hold.
fn as_inserts(state: &Materialized) -> Vec<Op> {
    let Value::Object(types) = state.to_json() else { return Vec::new() };
    let mut out = vec![Op::Control("reset")];
    for (t, rows) in types {
        let t: &'static str = match t.as_str() {
            "t0" => "t0",
            "t1" => "t1",
            _ => "t2",
        };
        for (k, v) in rows.as_object().into_iter().flatten() {
            out.push(Op::Change("insert", t.to_owned(), k.clone(), Some(v.clone())));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn folding_equals_the_reference_model(ops in prop::collection::vec(op(), 0..80)) {
        let mut state = Materialized::new();
        fold(&mut state, &ops);
        let (rows, malformed) = model(&ops);
        let flat: BTreeMap<(String, String), Value> = state
            .to_json()
            .as_object()
            .into_iter()
            .flatten()
            .flat_map(|(t, r)| r.as_object().into_iter().flatten().map(move |(k, v)| ((t.clone(), k.clone()), v.clone())))
            .collect();
        prop_assert_eq!(&flat, &rows);
        prop_assert_eq!(state.rows(), rows.len());
        let bytes: usize = rows.iter().map(|((t, k), v)| t.len() + k.len() + v.to_string().len()).sum();
        prop_assert_eq!(state.bytes(), bytes);
        prop_assert_eq!(state.malformed().count, malformed);
    }

    #[test]
    fn folding_in_two_halves_or_from_a_compacted_prefix_gives_the_same_state(
        ops in prop::collection::vec(op(), 0..80),
        cut in any::<prop::sample::Index>(),
    ) {
        let cut = cut.index(ops.len() + 1);
        let (head, tail) = ops.split_at(cut);
        let mut whole = Materialized::new();
        fold(&mut whole, &ops);
        let mut halves = Materialized::new();
        fold(&mut halves, head);
        let compacted = as_inserts(&halves);
        fold(&mut halves, tail);
        prop_assert_eq!(halves.to_json(), whole.to_json());
        prop_assert_eq!((halves.rows(), halves.bytes()), (whole.rows(), whole.bytes()));
        let mut replayed = Materialized::new();
        fold(&mut replayed, &compacted);
        fold(&mut replayed, tail);
        prop_assert_eq!(replayed.to_json(), whole.to_json());
        prop_assert_eq!((replayed.rows(), replayed.bytes()), (whole.rows(), whole.bytes()));
    }

    /// The compactor's real snapshot (`snapshot_messages`): a fresh reader
    /// of `snapshot ++ rest` and a live reader of `history ++ snapshot ++
    /// rest` both fold what `history ++ rest` folds.
    #[test]
    fn a_snapshot_restates_the_state_for_new_and_live_readers(
        ops in prop::collection::vec(op(), 0..80),
        cut in any::<prop::sample::Index>(),
    ) {
        let cut = cut.index(ops.len() + 1);
        let (head, tail) = ops.split_at(cut);
        let mut whole = Materialized::new();
        fold(&mut whole, &ops);
        let mut at_cut = Materialized::new();
        fold(&mut at_cut, head);
        let body = crate::state::snapshot_messages(&at_cut, "users", 4096);
        let snapshot: Vec<Value> = serde_json::from_slice(&body).expect("a snapshot is a JSON array");
        prop_assert_eq!(snapshot.len(), at_cut.rows() + 2);
        let mut fresh = Materialized::new();
        let mut live = at_cut.clone();
        for (i, message) in snapshot.iter().enumerate() {
            let bytes = message.to_string();
            prop_assert!(fresh.apply(i as u64, bytes.as_bytes()).is_ok(), "{}", bytes);
            prop_assert!(live.apply(i as u64, bytes.as_bytes()).is_ok());
        }
        prop_assert!(super::super::snapshot::is_own_snapshot(snapshot[0].to_string().as_bytes(), "users", 4096));
        prop_assert!(!super::super::snapshot::is_own_snapshot(snapshot[0].to_string().as_bytes(), "users", 4095));
        prop_assert!(!super::super::snapshot::is_own_snapshot(snapshot[0].to_string().as_bytes(), "other", 4096));
        fold(&mut fresh, tail);
        fold(&mut live, tail);
        prop_assert_eq!(fresh.to_json(), whole.to_json());
        prop_assert_eq!((fresh.rows(), fresh.bytes()), (whole.rows(), whole.bytes()));
        prop_assert_eq!(live.to_json(), whole.to_json());
    }
}
