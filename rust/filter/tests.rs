use super::*;
use proptest::prelude::*;
use serde_json::json;

fn input(v: serde_json::Value) -> Input {
    Input::from(&v)
}

fn record(v: serde_json::Value) -> Record {
    Record::from_input(input(v))
}

fn vector(v: serde_json::Value) -> Filter {
    Filter::vector(&input(v)).unwrap().unwrap()
}

#[test]
fn record_keeps_keys_sorted_and_replaces() {
    let mut r = record(json!({"b": 1, "a": "x", "c": [1]}));
    assert_eq!(r.get("a"), Some(&Value::Str("x".into())));
    assert_eq!(r.get("c"), Some(&Value::Other));
    assert_eq!(r.get("z"), None);
    r.set("b", Value::Null);
    r.set("aa", Value::Bool(true));
    assert_eq!(r.get("b"), Some(&Value::Null));
    assert_eq!(r.len(), 4);
    let keys: Vec<&str> = r.entries.iter().map(|(k, _)| &**k).collect();
    assert_eq!(keys, ["a", "aa", "b", "c"]);
    assert!(Record::from_input(Input::Null).is_empty());
}

#[test]
fn numbers_compare_across_int_and_float() {
    let r = record(json!({"n": 1, "f": 2.5}));
    assert!(vector(json!({"n": 1.0})).matches(&r));
    assert!(vector(json!({"f": {"$gt": 2}})).matches(&r));
    assert!(vector(json!({"n": {"$in": [3, 1.0]}})).matches(&r));
    assert!(!vector(json!({"n": {"$lt": 1}})).matches(&r));
}

#[test]
fn large_integers_compare_exactly_with_floats() {
    let big = (1i64 << 53) + 1;
    let r = Record::from_iter([("n", Value::Int(big))]);
    let as_float = Filter::Eq("n".into(), Value::Float(big as f64));
    assert!(!as_float.matches(&r));
    assert!(Filter::Gt("n".into(), Value::Float(big as f64)).matches(&r));
    let r = Record::from_iter([("n", Value::Int(i64::MAX))]);
    assert!(Filter::Lt("n".into(), Value::Float(9.3e18)).matches(&r));
    assert!(Filter::Gt("n".into(), Value::Float(-1e300)).matches(&r));
}

#[test]
fn bool_never_equals_number_and_str_only_str() {
    let r = record(json!({"b": true, "s": "1", "n": 1}));
    assert!(!vector(json!({"b": 1})).matches(&r));
    assert!(!vector(json!({"n": true})).matches(&r));
    assert!(!vector(json!({"s": 1})).matches(&r));
    assert!(!vector(json!({"n": "1"})).matches(&r));
    assert!(vector(json!({"b": true, "s": "1", "n": 1})).matches(&r));
}

#[test]
fn null_matches_only_stored_null() {
    let stored = record(json!({"k": null}));
    let missing = record(json!({}));
    let f = vector(json!({"k": null}));
    assert!(f.matches(&stored));
    assert!(!f.matches(&missing));
    let m = Filter::metadata(&input(json!({"k": null})))
        .unwrap()
        .unwrap();
    assert!(m.matches(&stored));
    assert!(!m.matches(&missing));
}

#[test]
fn other_values_are_present_but_equal_nothing() {
    let r = record(json!({"o": {"x": 1}}));
    assert!(!vector(json!({"o": null})).matches(&r));
    assert!(vector(json!({"o": {"$exists": true}})).matches(&r));
    assert!(vector(json!({"o": {"$ne": 1}})).matches(&r));
    assert!(!vector(json!({"o": {"$gte": 0}})).matches(&r));
}

#[test]
fn orderings_pair_numbers_with_numbers_and_strings_with_strings() {
    let r = record(json!({"d": "2024-05-01T10:00:00Z", "n": 5, "b": true}));
    assert!(vector(json!({"d": {"$gte": "2024-01-01", "$lt": "2025"}})).matches(&r));
    assert!(!vector(json!({"d": {"$gt": 1}})).matches(&r));
    assert!(!vector(json!({"n": {"$gt": "1"}})).matches(&r));
    assert!(!vector(json!({"b": {"$gte": 0}})).matches(&r));
    assert!(vector(json!({"n": {"$gte": 5, "$lte": 5}})).matches(&r));
    assert!(!vector(json!({"missing": {"$lt": 100}})).matches(&r));
}

#[test]
fn ne_and_nin_match_missing_keys() {
    let r = record(json!({"a": 1}));
    assert!(vector(json!({"z": {"$ne": 1}})).matches(&r));
    assert!(vector(json!({"z": {"$nin": [1]}})).matches(&r));
    assert!(!vector(json!({"a": {"$ne": 1.0}})).matches(&r));
    assert!(!vector(json!({"a": {"$nin": [2, 1]}})).matches(&r));
    assert!(!vector(json!({"z": {"$in": [null]}})).matches(&r));
}

#[test]
fn exists_checks_presence() {
    let r = record(json!({"a": null}));
    assert!(vector(json!({"a": {"$exists": true}})).matches(&r));
    assert!(!vector(json!({"a": {"$exists": false}})).matches(&r));
    assert!(vector(json!({"b": {"$exists": false}})).matches(&r));
}

#[test]
fn logical_operators_combine() {
    let r = record(json!({"a": 1, "b": "x"}));
    assert!(vector(json!({"$or": [{"a": 2}, {"b": "x"}]})).matches(&r));
    assert!(!vector(json!({"$and": [{"a": 1}, {"b": "y"}]})).matches(&r));
    assert!(vector(json!({"$not": {"a": 2}})).matches(&r));
    assert!(!vector(json!({"a": 1, "b": "y"})).matches(&r));
    assert!(vector(json!({"z": {"$not": {"$gt": 1}}})).matches(&r));
    assert!(!vector(json!({"a": {"$not": {"$gte": 1}}})).matches(&r));
    assert_eq!(Filter::vector(&input(json!({}))).unwrap(), None);
    assert_eq!(Filter::vector(&input(json!({"$and": [{}]}))).unwrap(), None);
}

#[test]
fn pinned_follows_and_paths_only() {
    let f = vector(json!({"thread_id": "t1", "$and": [{"r": {"$in": [1, 2]}}],
                          "$or": [{"x": 1}, {"y": 2}], "n": {"$gt": 3}}));
    let s = Value::Str("t1".into());
    // serde_json sorts object keys, so "$and" comes first.
    assert_eq!(
        f.pinned(),
        vec![
            ("r", vec![&Value::Int(1), &Value::Int(2)]),
            ("thread_id", vec![&s])
        ]
    );
    assert!(vector(json!({"$not": {"a": 1}})).pinned().is_empty());
}

// ---- property test: `matches` against a naive evaluator written independently ----

const KEYS: [&str; 4] = ["a", "b", "c", "d"];

fn arb_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..4).prop_map(Value::Int),
        prop_oneof![Just(-1.5), Just(0.0), Just(1.0), Just(2.0), Just(2.5)].prop_map(Value::Float),
        prop_oneof![Just("x"), Just("y"), Just("2024-01-01"), Just("")]
            .prop_map(|s| Value::Str(s.into())),
        Just(Value::Other),
    ]
}

fn arb_operand() -> impl Strategy<Value = Value> {
    arb_value().prop_filter("operands are scalars", |v| *v != Value::Other)
}

fn arb_key() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&KEYS[..])
}

fn arb_record() -> impl Strategy<Value = Record> {
    prop::collection::vec((arb_key(), arb_value()), 0..4)
        .prop_map(|entries| entries.into_iter().collect())
}

/// A filter as JSON-like input, in the vector dialect.
fn arb_filter_input() -> impl Strategy<Value = Input> {
    let leaf = (
        arb_key(),
        0..10usize,
        arb_operand(),
        prop::collection::vec(arb_operand(), 0..3),
    )
        .prop_map(|(key, op, v, vs)| {
            let scalar = value_input(&v);
            let list = Input::List(vs.iter().map(value_input).collect());
            let cond = match op {
                0 => scalar,
                1 => op_map("$eq", scalar),
                2 => op_map("$ne", scalar),
                3 => op_map("$gt", orderable_input(&v)),
                4 => op_map("$gte", orderable_input(&v)),
                5 => op_map("$lt", orderable_input(&v)),
                6 => op_map("$lte", orderable_input(&v)),
                7 => op_map("$in", list),
                8 => op_map("$nin", list),
                _ => op_map("$exists", Input::Bool(vs.len() % 2 == 0)),
            };
            Input::Map(vec![(key.to_string(), cond)])
        });
    leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..3)
                .prop_map(|fs| Input::Map(vec![("$and".into(), Input::List(fs))])),
            prop::collection::vec(inner.clone(), 1..3)
                .prop_map(|fs| Input::Map(vec![("$or".into(), Input::List(fs))])),
            inner
                .clone()
                .prop_map(|f| Input::Map(vec![("$not".into(), f)])),
            prop::collection::vec(inner, 1..3).prop_map(|fs| {
                // Several entries in one map AND; merging keeps the first of a duplicate.
                let mut entries: Vec<(String, Input)> = Vec::new();
                for f in fs {
                    if let Input::Map(es) = f {
                        for (k, v) in es {
                            if !entries.iter().any(|(e, _)| *e == k) {
                                entries.push((k, v));
                            }
                        }
                    }
                }
                Input::Map(entries)
            }),
        ]
    })
}

fn value_input(v: &Value) -> Input {
    match v {
        Value::Null => Input::Null,
        Value::Bool(b) => Input::Bool(*b),
        Value::Int(i) => Input::Int(*i),
        Value::Float(f) => Input::Float(*f),
        Value::Str(s) => Input::Str(s.to_string()),
        Value::Other => Input::List(vec![]),
    }
}

fn orderable_input(v: &Value) -> Input {
    match v {
        Value::Int(_) | Value::Float(_) | Value::Str(_) => value_input(v),
        _ => Input::Int(1),
    }
}

fn op_map(op: &str, v: Input) -> Input {
    Input::Map(vec![(op.into(), v)])
}

/// Naive evaluation straight from the input tree, sharing no code with `Filter::matches`.
fn naive(filter: &Input, r: &Record) -> bool {
    let Input::Map(entries) = filter else {
        unreachable!()
    };
    entries.iter().all(|(k, v)| match (k.as_str(), v) {
        ("$and", Input::List(fs)) => fs.iter().all(|f| naive(f, r)),
        ("$or", Input::List(fs)) => fs.iter().any(|f| naive(f, r)),
        ("$not", f) => !naive(f, r),
        (field, Input::Map(ops)) => ops.iter().all(|(op, x)| naive_op(r.get(field), op, x)),
        (field, x) => naive_op(r.get(field), "$eq", x),
    })
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    }
}

fn naive_eq(s: &Value, x: &Input) -> bool {
    match (s, x) {
        (Value::Null, Input::Null) => true,
        (Value::Bool(a), Input::Bool(b)) => a == b,
        (Value::Str(a), Input::Str(b)) => **a == *b,
        (Value::Int(_) | Value::Float(_), Input::Int(_) | Input::Float(_)) => {
            as_f64(s) == as_f64(&Value::from_input(x.clone()))
        }
        _ => false,
    }
}

fn naive_cmp(s: &Value, x: &Input) -> Option<Ordering> {
    match (s, x) {
        (Value::Str(a), Input::Str(b)) => Some((**a).cmp(b.as_str())),
        (Value::Int(_) | Value::Float(_), Input::Int(_) | Input::Float(_)) => {
            as_f64(s)?.partial_cmp(&as_f64(&Value::from_input(x.clone()))?)
        }
        _ => None,
    }
}

fn naive_op(s: Option<&Value>, op: &str, x: &Input) -> bool {
    let list = |x: &Input| match x {
        Input::List(items) => items.clone(),
        _ => unreachable!(),
    };
    match op {
        "$eq" => s.is_some_and(|s| naive_eq(s, x)),
        "$ne" => !s.is_some_and(|s| naive_eq(s, x)),
        "$gt" => s.and_then(|s| naive_cmp(s, x)) == Some(Ordering::Greater),
        "$gte" => matches!(
            s.and_then(|s| naive_cmp(s, x)),
            Some(Ordering::Greater | Ordering::Equal)
        ),
        "$lt" => s.and_then(|s| naive_cmp(s, x)) == Some(Ordering::Less),
        "$lte" => matches!(
            s.and_then(|s| naive_cmp(s, x)),
            Some(Ordering::Less | Ordering::Equal)
        ),
        "$in" => s.is_some_and(|s| list(x).iter().any(|i| naive_eq(s, i))),
        "$nin" => !s.is_some_and(|s| list(x).iter().any(|i| naive_eq(s, i))),
        "$exists" => s.is_some() == (*x == Input::Bool(true)),
        "$not" => !match x {
            Input::Map(ops) => ops.iter().all(|(op, y)| naive_op(s, op, y)),
            _ => unreachable!(),
        },
        _ => unreachable!(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, rng_seed: proptest::test_runner::RngSeed::Fixed(0x7e11), ..ProptestConfig::default() })]

    #[test]
    fn matches_agrees_with_naive_evaluator(f in arb_filter_input(), records in prop::collection::vec(arb_record(), 1..6)) {
        let parsed = Filter::vector(&f).unwrap().unwrap_or(Filter::All);
        for r in &records {
            prop_assert_eq!(parsed.matches(r), naive(&f, r), "filter {:?} record {:?}", f, r);
        }
    }

    #[test]
    fn metadata_filter_agrees_with_naive_evaluator(
        terms in prop::collection::vec((arb_key(), arb_operand()), 0..4),
        records in prop::collection::vec(arb_record(), 1..6),
    ) {
        let mut entries: Vec<(String, Input)> = Vec::new();
        for (k, v) in &terms {
            if !entries.iter().any(|(e, _)| e == k) {
                entries.push((k.to_string(), value_input(v)));
            }
        }
        let input = Input::Map(entries.clone());
        let parsed = Filter::metadata(&input).unwrap();
        prop_assert_eq!(parsed.is_none(), entries.is_empty());
        for r in &records {
            let expected = entries.iter().all(|(k, v)| r.get(k).is_some_and(|s| naive_eq(s, v)));
            prop_assert_eq!(parsed.as_ref().is_none_or(|f| f.matches(r)), expected);
        }
    }
}
