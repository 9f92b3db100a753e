use super::*;
use crate::distance::Metric;
use crate::filter::Input;
use crate::filter::{Fields, Record, Scalar};
use crate::vector::graph::tests::clustered;
use crate::vector::plan::{filtered_ef, EF_DEFAULT, EF_FILTERED};

fn s(x: &str) -> Input {
    Input::Str(x.into())
}

fn map(entries: Vec<(&str, Input)>) -> Input {
    Input::Map(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn filter(input: Input) -> Filter {
    Filter::vector(&input).unwrap().unwrap()
}

/// `n` vectors; thread t0 holds every 500th, resource r{i%4}, `bucket` = i % 100 (posted),
/// `n` = i (too many values to be posted: sorted), `name` = `x{i:05}` (strings of too many
/// values: neither posted nor sorted).
fn index(n: usize) -> (VectorIndex, Vec<Vec<f32>>) {
    // seed 21 for data, graph seed 3
    let data = clustered(21, n, 24, 40);
    let mut idx = VectorIndex::new(24, Metric::Cosine, 12, 80, 3).unwrap();
    let ids = (0..n).map(|i| format!("v{i}")).collect();
    let flat: Vec<f32> = data.iter().flatten().copied().collect();
    let metas = (0..n)
        .map(|i| {
            let thread = if i % 500 == 0 {
                "t0".to_string()
            } else {
                format!("t{}", 1 + i % 7)
            };
            map(vec![
                ("thread_id", s(&thread)),
                ("resource_id", s(&format!("r{}", i % 4))),
                ("bucket", Input::Int((i % 100) as i64)),
                ("n", Input::Int(i as i64)),
                ("name", s(&format!("x{i:05}"))),
            ])
        })
        .collect();
    idx.add(ids, &flat, metas).unwrap();
    idx.link_pending(usize::MAX);
    (idx, data)
}

fn ids(found: &[Near], idx: &VectorIndex) -> Vec<String> {
    found
        .iter()
        .map(|n| idx.ids[n.slot as usize].to_string())
        .collect()
}

#[test]
fn exact_scan_over_codes_equals_measuring_every_float_vector() {
    // seed 5 for data (scaled unevenly so the norms differ), 6 for queries
    let data: Vec<Vec<f32>> = clustered(5, 600, 40, 12)
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            v.iter()
                .map(|x| x * (0.5 + (i % 7) as f32 * 15.0))
                .collect()
        })
        .collect();
    let queries = clustered(6, 20, 40, 12);
    for metric in [Metric::Cosine, Metric::Euclidean, Metric::DotProduct] {
        let mut idx = VectorIndex::new(40, metric, 8, 40, 1).unwrap();
        let ids = (0..data.len()).map(|i| format!("v{i}")).collect();
        let flat: Vec<f32> = data.iter().flatten().copied().collect();
        idx.add(ids, &flat, vec![Input::Map(Default::default()); data.len()])
            .unwrap();
        let all: Vec<u32> = (0..data.len() as u32).collect();
        for q in &queries {
            let mut q = q.clone();
            metric.prepare(&mut q);
            for k in [1, 7, 50] {
                let mut naive: Vec<Near> = all
                    .iter()
                    .map(|&slot| Near {
                        dist: metric.distance(&q, &idx.graph.vector(slot).unwrap()),
                        slot,
                    })
                    .collect();
                naive.sort_unstable();
                naive.truncate(k);
                assert_eq!(exact(&idx, &q, k, all.clone()), naive, "{metric:?} k={k}");
            }
        }
    }
}

#[test]
fn small_thread_takes_the_exact_posted_path() {
    let (idx, _) = index(6000);
    let f = filter(map(vec![("thread_id", s("t0"))]));
    assert_eq!(plan_for(&idx, 10, Some(&f), None).0, Plan::ExactPosted);
    let f = filter(map(vec![(
        "$and",
        Input::List(vec![
            map(vec![("resource_id", s("r0"))]),
            map(vec![("thread_id", s("t0"))]),
        ]),
    )]));
    assert_eq!(plan_for(&idx, 10, Some(&f), None).0, Plan::ExactPosted);
}

#[test]
fn large_resource_takes_the_graph_with_ef_raised_as_selectivity_falls() {
    let (idx, _) = index(20000);
    // A quarter (5,000 of 20,000): scanning it reads less than a walk of breadth 32.
    let f = filter(map(vec![("resource_id", s("r1"))]));
    assert_eq!(plan_for(&idx, 10, Some(&f), None).0, Plan::ExactPosted);
    // Half: the walk.
    let both = filter(map(vec![(
        "resource_id",
        map(vec![("$in", Input::List(vec![s("r1"), s("r2")]))]),
    )]));
    assert_eq!(
        plan_for(&idx, 10, Some(&both), None).0,
        Plan::Graph { ef: EF_FILTERED }
    );
    assert_eq!(
        plan_for(&idx, 10, Some(&both), Some(30)).0,
        Plan::Graph { ef: 30 }
    );
    assert_eq!(filtered_ef(None, 10, 500, 20000), 2 * EF_FILTERED); // 2.5 %: twice the breadth
    assert_eq!(filtered_ef(None, 50, 500, 20000), 100);
    assert_eq!(
        plan_for(&idx, 10, None, None).0,
        Plan::Graph { ef: EF_DEFAULT }
    );
}

#[test]
fn a_rare_range_on_a_key_of_many_values_is_scanned_from_its_sorted_numbers() {
    let (idx, _) = index(6000);
    assert!(!idx.postings.is_posted("n"));
    let f = filter(map(vec![("n", map(vec![("$lt", Input::Int(120))]))]));
    let (chosen, c) = plan_for(&idx, 10, Some(&f), None);
    assert_eq!(chosen, Plan::ExactPosted);
    assert_eq!(c.unwrap().slots.len(), 120);
    let common = filter(map(vec![("n", map(vec![("$lt", Input::Int(5400))]))]));
    assert!(matches!(
        plan_for(&idx, 10, Some(&common), None).0,
        Plan::Graph { .. }
    ));
    // Everything but one value: counted as the complement of one list.
    let most = filter(map(vec![("n", map(vec![("$ne", Input::Int(7))]))]));
    let (chosen, c) = plan_for(&idx, 10, Some(&most), None);
    assert!(matches!(chosen, Plan::Graph { .. }));
    let c = c.unwrap();
    assert!(c.exact && c.complement && c.count(idx.len()) == 5999);
}

#[test]
fn a_rare_unbounded_filter_takes_the_exact_scan() {
    let (idx, _) = index(6000);
    let f = filter(map(vec![("name", map(vec![("$lt", s("x00120"))]))]));
    assert!(idx.postings.candidates(&f, idx.len()).is_none());
    assert_eq!(plan_for(&idx, 10, Some(&f), None).0, Plan::ExactAll);
}

#[test]
fn a_rare_value_of_any_low_cardinality_key_is_scanned_from_its_lists() {
    let (idx, _) = index(20000);
    assert!(idx.postings.is_posted("bucket"));
    let f = filter(map(vec![("bucket", Input::Int(7))]));
    let (chosen, candidates) = plan_for(&idx, 10, Some(&f), None);
    assert_eq!(chosen, Plan::ExactPosted);
    let c = candidates.unwrap();
    assert!(c.exact);
    assert_eq!(c.slots.len(), 200);
    let range = filter(map(vec![(
        "bucket",
        map(vec![("$gte", Input::Float(97.5))]),
    )]));
    let c = plan_for(&idx, 10, Some(&range), None).1.unwrap();
    assert_eq!(c.slots.len(), 400);
    let mixed = filter(map(vec![
        ("bucket", map(vec![("$lt", Input::Int(3))])),
        ("n", map(vec![("$lt", Input::Int(10000))])),
    ]));
    let (chosen, c) = plan_for(&idx, 10, Some(&mixed), None);
    assert_eq!(chosen, Plan::ExactPosted);
    assert!(c.unwrap().exact); // the sorted numbers of `n` bound it too
    let unsorted = filter(map(vec![
        ("bucket", map(vec![("$lt", Input::Int(3))])),
        ("name", map(vec![("$lt", s("x10000"))])),
    ]));
    // The lists only bound it (600 slots)...
    assert!(!idx.postings.candidates(&unsorted, idx.len()).unwrap().exact);
    // ...and so few are checked record by record: exactly the 300 that pass.
    let (chosen, c) = plan_for(&idx, 10, Some(&unsorted), None);
    assert_eq!(chosen, Plan::ExactPosted);
    let c = c.unwrap();
    assert!(c.exact);
    assert_eq!(c.slots.len(), 300);
}

#[test]
fn a_small_list_and_a_wide_range_check_the_lists_records_against_the_range() {
    let (idx, _) = index(20000);
    let f = filter(map(vec![
        ("bucket", Input::Int(7)),
        ("n", map(vec![("$lt", Input::Int(10000))])),
    ]));
    // The range (10,000 slots) is not gathered: the list's 200 slots bound the filter.
    let c = idx.postings.candidates(&f, idx.len()).unwrap();
    assert!(!c.exact && !c.complement);
    assert_eq!(c.slots.len(), 200);
    // Their records checked against the range: exactly the 100 that pass.
    let (chosen, c) = plan_for(&idx, 10, Some(&f), None);
    assert_eq!(chosen, Plan::ExactPosted);
    let c = c.unwrap();
    assert!(c.exact);
    assert_eq!(c.slots.len(), 100);
    let mut want: Vec<String> = (0..10000)
        .step_by(100)
        .map(|i| format!("v{}", i + 7))
        .collect();
    want.sort();
    let mut got = idx.ids_where(&f);
    got.sort();
    assert_eq!(got, want);
    // Negated, the range is gathered: only an exact set has a complement.
    let not = filter(map(vec![(
        "$not",
        map(vec![
            ("bucket", Input::Int(7)),
            ("n", map(vec![("$lt", Input::Int(10000))])),
        ]),
    )]));
    let c = idx.postings.candidates(&not, idx.len()).unwrap();
    assert!(c.exact && c.complement && c.count(idx.len()) == 19900);
    // A range near the list's size is gathered and intersected.
    let near = filter(map(vec![
        ("bucket", Input::Int(7)),
        ("n", map(vec![("$lt", Input::Int(1000))])),
    ]));
    let c = idx.postings.candidates(&near, idx.len()).unwrap();
    assert!(c.exact);
    assert_eq!(c.slots.len(), 10);
}

#[test]
fn a_range_written_under_its_key_is_planned_as_the_same_bounds_written_apart() {
    let (idx, _) = index(20000);
    let range = |lo, hi| {
        map(vec![(
            "n",
            map(vec![("$gte", Input::Int(lo)), ("$lt", Input::Int(hi))]),
        )])
    };
    let apart = |lo, hi| {
        map(vec![(
            "$and",
            Input::List(vec![
                map(vec![("bucket", Input::Int(7))]),
                map(vec![("n", map(vec![("$gte", Input::Int(lo))]))]),
                map(vec![("n", map(vec![("$lt", Input::Int(hi))]))]),
            ]),
        )])
    };
    for (lo, hi) in [(0, 10000), (3000, 3500)] {
        let under_key = filter(map(vec![(
            "$and",
            Input::List(vec![map(vec![("bucket", Input::Int(7))]), range(lo, hi)]),
        )]));
        let got = idx.postings.candidates(&under_key, idx.len()).unwrap();
        let want = idx
            .postings
            .candidates(&filter(apart(lo, hi)), idx.len())
            .unwrap();
        assert_eq!((got.slots, got.exact), (want.slots, want.exact));
    }
}

#[test]
fn bounds_on_a_posted_key_read_the_lists_inside_their_interval() {
    // `bucket` = i % 100 is posted; `mixed` (posted too) holds ints, floats, strings and
    // nulls: numeric bounds allow only its numbers, string bounds only its strings. Each
    // filter's slots equal evaluating every record.
    let (mut idx, data) = index(2000);
    let n = idx.len();
    let flat: Vec<f32> = data.iter().take(400).flatten().copied().collect();
    let mixed = |i: usize| match i % 4 {
        0 => Input::Int((i % 10) as i64),
        1 => Input::Float((i % 10) as f64 + 0.5),
        2 => s(&format!("{}", i % 10)),
        _ => Input::Null,
    };
    idx.add(
        (0..400).map(|i| format!("m{i}")).collect(),
        &flat,
        (0..400).map(|i| map(vec![("mixed", mixed(i))])).collect(),
    )
    .unwrap();
    assert!(idx.postings.is_posted("bucket") && idx.postings.is_posted("mixed"));
    let bounds =
        |key: &str, ops: &[(&'static str, Input)]| filter(map(vec![(key, map(ops.to_vec()))]));
    let cases = [
        bounds(
            "bucket",
            &[("$gte", Input::Int(10)), ("$lt", Input::Int(20))],
        ),
        bounds(
            "bucket",
            &[("$gt", Input::Float(9.5)), ("$lte", Input::Int(10))],
        ),
        bounds(
            "bucket",
            &[("$gte", Input::Int(5)), ("$lte", Input::Int(5))],
        ),
        bounds("bucket", &[("$gt", Input::Int(5)), ("$lt", Input::Int(5))]),
        bounds("bucket", &[("$gte", Input::Int(5)), ("$lt", Input::Int(5))]),
        bounds(
            "bucket",
            &[("$gt", Input::Int(60)), ("$lt", Input::Int(30))],
        ),
        bounds(
            "bucket",
            &[("$gte", Input::Int(-5)), ("$lt", Input::Float(2.5))],
        ),
        bounds("mixed", &[("$gte", Input::Int(2)), ("$lt", Input::Int(7))]),
        bounds(
            "mixed",
            &[("$gt", Input::Float(2.5)), ("$lte", Input::Float(8.5))],
        ),
        bounds("mixed", &[("$gte", s("3")), ("$lt", s("7"))]),
        bounds("mixed", &[("$gt", s("")), ("$lte", s("2"))]),
        bounds("mixed", &[("$gt", s("5")), ("$lt", s("5"))]),
        bounds("mixed", &[("$gt", s("8")), ("$lt", s("1"))]),
        bounds("mixed", &[("$gte", Input::Int(2)), ("$lt", s("5"))]),
        filter(map(vec![(
            "$and",
            Input::List(vec![
                map(vec![("mixed", map(vec![("$lt", Input::Int(4))]))]),
                map(vec![(
                    "$and",
                    Input::List(vec![map(vec![(
                        "mixed",
                        map(vec![("$gte", Input::Float(0.5))]),
                    )])]),
                )]),
            ]),
        )])),
    ];
    for f in &cases {
        let c = idx.postings.candidates(f, idx.len()).unwrap();
        assert!(c.exact && !c.complement, "{f:?}");
        let want: Vec<u32> = (0..(n + 400) as u32)
            .filter(|&slot| f.matches(&idx.records.get(slot)))
            .collect();
        assert_eq!(c.slots, want, "{f:?}");
    }
}

#[test]
fn a_nin_of_most_values_of_a_key_every_vector_holds_reads_the_other_lists() {
    // `bucket` = i % 100 on every vector: $nin of 90 buckets is the lists of the other 10.
    let (mut idx, data) = index(3000);
    let most = filter(map(vec![(
        "bucket",
        map(vec![(
            "$nin",
            Input::List((10..100).map(Input::Int).collect()),
        )]),
    )]));
    let passing = |idx: &VectorIndex, f: &Filter| -> Vec<u32> {
        (0..idx.graph.slots() as u32)
            .filter(|&s| !idx.graph.is_deleted(s) && f.matches(&idx.records.get(s)))
            .collect()
    };
    let c = idx.postings.candidates(&most, idx.len()).unwrap();
    assert!(c.exact && !c.complement);
    assert_eq!(c.slots, passing(&idx, &most));
    // Deleted vectors leave the count of live ones: the key is still held by all of them.
    idx.remove(&["v5".to_string(), "v17".to_string()]);
    let c = idx.postings.candidates(&most, idx.len()).unwrap();
    assert!(c.exact && !c.complement);
    let live: Vec<u32> = c
        .slots
        .into_iter()
        .filter(|&s| !idx.graph.is_deleted(s))
        .collect();
    assert_eq!(live, passing(&idx, &most));
    // A vector without the key passes too: the set is the complement again.
    idx.add(
        vec!["bare".into()],
        &data[0],
        vec![map(vec![("n", Input::Int(1))])],
    )
    .unwrap();
    let c = idx.postings.candidates(&most, idx.len()).unwrap();
    assert!(c.exact && c.complement);
    let outside: Vec<u32> = (0..idx.graph.slots() as u32)
        .filter(|s| !idx.graph.is_deleted(*s) && c.slots.binary_search(s).is_err())
        .collect();
    assert_eq!(outside, passing(&idx, &most));
    // A $nin of a few values stays the complement of their lists.
    let few = filter(map(vec![("bucket", map(vec![("$ne", Input::Int(3))]))]));
    assert!(idx.postings.candidates(&few, idx.len()).unwrap().complement);
}

#[test]
fn small_index_is_scanned() {
    let (idx, _) = index(1000);
    assert_eq!(plan_for(&idx, 10, None, None).0, Plan::ExactAll);
}

#[test]
fn graph_falls_back_to_exact_when_it_finds_fewer_than_k() {
    // Half the vectors pass, far too many for the exact scan, so the graph is chosen; but
    // k asks for more than pass, the graph comes back short, and the exact scan answers.
    let (idx, data) = index(12000);
    let f = filter(map(vec![("name", map(vec![("$lt", s("x06000"))]))]));
    assert!(matches!(
        plan_for(&idx, 7000, Some(&f), None).0,
        Plan::Graph { .. }
    ));
    let mut q = data[0].clone();
    Metric::Cosine.prepare(&mut q);
    let (found, fell_back) = search_traced(&idx, &q, 7000, Some(&f), None);
    assert!(fell_back);
    let truth = exact(&idx, &q, 7000, allowed_slots(&idx, Some(&f)));
    assert_eq!(found.len(), 6000);
    assert_eq!(ids(&found, &idx), ids(&truth, &idx));
}

#[test]
fn filtered_graph_search_collects_only_allowed_vectors_and_keeps_recall() {
    // seed 21 (see `index`); half of the vectors pass, so the graph answers. On these
    // tight clusters a filtered walk trails an unfiltered one at the same breadth, hence the
    // lower bar than the unfiltered test's 0.95.
    let (idx, data) = index(20000);
    let f = filter(map(vec![(
        "resource_id",
        map(vec![("$in", Input::List(vec![s("r1"), s("r2")]))]),
    )]));
    assert!(matches!(
        plan_for(&idx, 10, Some(&f), None).0,
        Plan::Graph { .. }
    ));

    let mut hits = 0;
    for q in data.iter().step_by(97).take(100) {
        let mut q = q.clone();
        Metric::Cosine.prepare(&mut q);
        let got = search(&idx, &q, 10, Some(&f), None);
        assert!(got.iter().all(|n| matches!(
            idx.records.get(n.slot).field("resource_id"),
            Some(Scalar::Str("r1" | "r2"))
        )));
        let want = ids(&exact(&idx, &q, 10, allowed_slots(&idx, Some(&f))), &idx);
        let got = ids(&got, &idx);
        hits += want.iter().filter(|w| got.contains(w)).count();
    }
    assert!(hits >= 900, "recall {}", hits as f64 / 1000.0);
}

#[test]
fn filtered_results_equal_the_exact_filtered_top_k() {
    let (idx, data) = index(6000);
    let filters = [
        map(vec![("thread_id", s("t0"))]),
        map(vec![(
            "thread_id",
            map(vec![("$in", Input::List(vec![s("t0"), s("t3")]))]),
        )]),
        map(vec![
            ("resource_id", s("r2")),
            ("bucket", map(vec![("$gte", Input::Int(97))])),
        ]),
        map(vec![("bucket", Input::Int(7))]),
        map(vec![("thread_id", s("nobody"))]),
    ];
    for input in filters {
        let f = filter(input);
        for q in data.iter().step_by(301).take(10) {
            let mut q = q.clone();
            Metric::Cosine.prepare(&mut q);
            let got = search(&idx, &q, 10, Some(&f), None);
            let want = exact(&idx, &q, 10, allowed_slots(&idx, Some(&f)));
            assert_eq!(ids(&got, &idx), ids(&want, &idx));
        }
    }
}

// ---- property test: slot lists and both search paths against evaluating every record ----

use proptest::prelude::*;

fn arb_leaf() -> impl Strategy<Value = Input> {
    let value = prop_oneof![
        (0i64..12).prop_map(Input::Int),
        (0i64..12).prop_map(|x| Input::Float(x as f64 * 0.5)),
        (0u8..6).prop_map(|x| Input::Str(format!("s{x}"))),
        any::<bool>().prop_map(Input::Bool),
    ];
    let key = prop_oneof![Just("i"), Just("f"), Just("s"), Just("b")];
    leaf(key, value, |a| matches!(a, Input::Bool(_)), 3)
}

/// `{key: {op: operand}}` for every comparison operator: `$in`/`$nin` take both values,
/// a range whose value `unordered` rejects compares with `fallback` instead.
fn leaf(
    key: impl Strategy<Value = &'static str>,
    value: impl Strategy<Value = Input> + Clone,
    unordered: fn(&Input) -> bool,
    fallback: i64,
) -> impl Strategy<Value = Input> {
    let op = prop_oneof![
        Just("$eq"),
        Just("$ne"),
        Just("$gt"),
        Just("$gte"),
        Just("$lt"),
        Just("$lte"),
        Just("$in"),
        Just("$nin"),
    ];
    (key, op, value.clone(), value).prop_map(move |(key, op, a, b)| {
        let operand = match op {
            "$in" | "$nin" => Input::List(vec![a, b]),
            "$gt" | "$gte" | "$lt" | "$lte" if unordered(&a) => Input::Int(fallback),
            _ => a,
        };
        map(vec![(key, map(vec![(op, operand)]))])
    })
}

fn arb_filter() -> impl Strategy<Value = Input> {
    arb_leaf().prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4)
                .prop_map(|fs| map(vec![("$and", Input::List(fs))])),
            prop::collection::vec(inner.clone(), 1..4)
                .prop_map(|fs| map(vec![("$or", Input::List(fs))])),
            inner.prop_map(|f| map(vec![("$not", f)])),
        ]
    })
}

/// Record `i`'s metadata in round `round`: int, float, string and bool keys, some missing.
fn meta(i: usize, round: usize) -> Input {
    let x = i * 7 + round * 3;
    let mut entries = vec![("i", Input::Int((x % 12) as i64))];
    if !x.is_multiple_of(5) {
        entries.push(("f", Input::Float((x % 9) as f64 * 0.5)));
    }
    if x % 4 != 1 {
        entries.push(("s", s(&format!("s{}", x % 6))));
    }
    entries.push(("b", Input::Bool(x.is_multiple_of(3))));
    map(entries)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn filtered_search_equals_evaluating_every_record(filters in prop::collection::vec(arb_filter(), 4)) {
        // seed 31 for data; 400 vectors, then 100 rewritten with new metadata and 60 removed
        let data = clustered(31, 400, 8, 6);
        let (idx, names) = rewritten_index(&data, meta, 7);
        let mut q = data[5].clone();
        Metric::Cosine.prepare(&mut q);
        for input in filters {
            check_filter(&idx, &names, &filter(input), 7, meta, &q)?;
        }
    }
}

/// An index of `data` with `meta(i, 0)`, linked; then every 4th vector rewritten with
/// `meta(i, 1)` (left unlinked) and every `removed`th removed.
fn rewritten_index(
    data: &[Vec<f32>],
    meta: fn(usize, usize) -> Input,
    removed: usize,
) -> (VectorIndex, Vec<String>) {
    let n = data.len();
    let mut idx = VectorIndex::new(8, Metric::Cosine, 8, 40, 2).unwrap();
    let flat: Vec<f32> = data.iter().flatten().copied().collect();
    let names: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
    idx.add(names.clone(), &flat, (0..n).map(|i| meta(i, 0)).collect())
        .unwrap();
    idx.link_pending(usize::MAX);
    let rewritten: Vec<usize> = (0..n).step_by(4).collect();
    idx.add(
        rewritten.iter().map(|&i| names[i].clone()).collect(),
        &rewritten
            .iter()
            .flat_map(|&i| data[i].clone())
            .collect::<Vec<f32>>(),
        rewritten.iter().map(|&i| meta(i, 1)).collect(),
    )
    .unwrap();
    let gone: Vec<String> = (0..n).step_by(removed).map(|i| names[i].clone()).collect();
    idx.remove(&gone);
    (idx, names)
}

/// `f` over an index of `rewritten_index`: its ids those of the records evaluated one by one,
/// its top 10 for `q` the exact filtered top 10, and a graph walk returns only passing ids.
fn check_filter(
    idx: &VectorIndex,
    names: &[String],
    f: &Filter,
    removed: usize,
    meta: fn(usize, usize) -> Input,
    q: &[f32],
) -> Result<(), TestCaseError> {
    let current = |i: usize| Record::from_input(meta(i, usize::from(i.is_multiple_of(4))));
    let mut want: Vec<String> = (0..names.len())
        .filter(|&i| i % removed != 0 && f.matches(&current(i)))
        .map(|i| names[i].clone())
        .collect();
    want.sort();
    let mut got = idx.ids_where(f);
    got.sort();
    prop_assert_eq!(&got, &want, "{:?}", f);
    let truth = exact(idx, q, 10, allowed_slots(idx, Some(f)));
    prop_assert_eq!(
        ids(&search(idx, q, 10, Some(f), None), idx),
        ids(&truth, idx)
    );
    let (_, candidates) = plan_for(idx, 10, Some(f), None);
    let walked = graph_search(idx, q, 10, 64, Some(f), candidates.as_ref());
    prop_assert!(walked.len() <= truth.len());
    for id in ids(&walked, idx) {
        prop_assert!(want.contains(&id), "{} does not pass {:?}", id, f);
    }
    Ok(())
}

// ---- the same against keys of too many values to post (their numbers sorted) ----

/// Record `i` of the wide index: `t` mixes ints, floats, strings, nulls and gaps; `u` holds
/// only numbers (or nothing); `i` is posted.
fn wide_meta(i: usize, round: usize) -> Input {
    let x = i + round * 5000;
    let mut entries = vec![("i", Input::Int((x % 12) as i64))];
    match x % 10 {
        0 => {}
        1 => entries.push(("t", Input::Null)),
        2 => entries.push(("t", s(&format!("s{}", x % 5)))),
        3 => entries.push(("t", Input::Float(x as f64 + 0.5))),
        _ => entries.push(("t", Input::Int(x as i64))),
    }
    if !x.is_multiple_of(13) {
        let u = (x * 37 % 2000) as i64;
        entries.push((
            "u",
            if x.is_multiple_of(7) {
                Input::Float(u as f64 / 4.0)
            } else {
                Input::Int(u)
            },
        ));
    }
    map(entries)
}

const WIDE: usize = 1600;

/// Built once: 1,600 vectors, 400 rewritten with new metadata, every 9th removed.
fn wide_index() -> &'static (VectorIndex, Vec<String>) {
    static INDEX: std::sync::OnceLock<(VectorIndex, Vec<String>)> = std::sync::OnceLock::new();
    // seed 41 for data
    INDEX.get_or_init(|| rewritten_index(&clustered(41, WIDE, 8, 6), wide_meta, 9))
}

fn arb_wide_leaf() -> impl Strategy<Value = Input> {
    let value = prop_oneof![
        (0i64..WIDE as i64 + 5200).prop_map(Input::Int),
        (0i64..2100).prop_map(|x| Input::Float(x as f64 * 0.25 + 0.5)),
        (0u8..6).prop_map(|x| Input::Str(format!("s{x}"))),
        Just(Input::Null),
    ];
    let key = prop_oneof![Just("t"), Just("u"), Just("i")];
    leaf(key, value, |a| matches!(a, Input::Null), 700)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn sorted_numbers_answer_filters_as_evaluating_every_record(
        input in arb_wide_leaf().prop_recursive(3, 10, 3, |inner| prop_oneof![
            prop::collection::vec(inner.clone(), 1..4)
                .prop_map(|fs| map(vec![("$and", Input::List(fs))])),
            prop::collection::vec(inner.clone(), 1..4)
                .prop_map(|fs| map(vec![("$or", Input::List(fs))])),
            inner.prop_map(|f| map(vec![("$not", f)])),
        ])
    ) {
        let (idx, names) = wide_index();
        prop_assert!(!idx.postings.is_posted("t") && !idx.postings.is_posted("u"));
        // seed 41 data; the query is vector 5
        let mut q = clustered(41, 6, 8, 6)[5].clone();
        Metric::Cosine.prepare(&mut q);
        check_filter(idx, names, &filter(input), 9, wide_meta, &q)?;
    }
}
