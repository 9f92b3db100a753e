//! Per query: exact scan of the allowed vectors, or a filtered graph search — and the exact
//! scan itself. Also owns the per-value slot lists of `thread_id` and `resource_id`, kept up
//! to date on insert and delete, which make a thread's or resource's exact scan touch only its
//! own vectors.

use std::collections::HashMap;

use crate::filter::{Fields, Filter, Scalar, Value};
use crate::vector::graph::{Near, Query};
use crate::vector::VectorIndex;

/// Metadata keys whose values get slot lists.
pub const POSTED_KEYS: [&str; 2] = ["resource_id", "thread_id"];
/// At or under this many allowed vectors, an exact scan beats the graph (and is exact).
pub const EXACT_MAX: usize = 4096;
/// Slots read to estimate how many vectors an arbitrary filter allows.
pub const SAMPLE_SIZE: usize = 1024;
/// Search breadth without a filter, when the caller gives none.
pub const EF_DEFAULT: usize = 40;
/// Search breadth with a filter allowing `WIDE_SELECTIVITY` or more of the vectors, when the
/// caller gives none. Below the unfiltered default because each extra unit of breadth costs
/// `1/selectivity` more distance computations; 100k x 384 mixture data keeps recall@10 at
/// 0.99+ with it at 10 % selectivity.
pub const EF_FILTERED: usize = 32;
/// The allowed fraction below which a filtered search's breadth starts to grow.
pub const WIDE_SELECTIVITY: f64 = 0.1;
/// Upper bound on the breadth after raising it for a selective filter.
pub const EF_MAX: usize = 2048;
/// How many vectors an exact scan reads for the cost of one a graph search reads: the scan
/// walks a slot list in order with prefetching, the graph jumps around memory.
pub const SCAN_ADVANTAGE: f64 = 2.0;

/// The slots holding one value of a posted key; may include tombstones, purged when they
/// reach half the list.
#[derive(Default, Debug)]
struct SlotList {
    slots: Vec<u32>,
    live: usize,
}

/// Per posted key, value → slots.
#[derive(Default, Debug)]
pub struct Postings {
    lists: [HashMap<Box<str>, SlotList>; POSTED_KEYS.len()],
}

impl Postings {
    pub fn add<R: Fields + ?Sized>(&mut self, slot: u32, record: &R) {
        for (key, map) in POSTED_KEYS.iter().zip(self.lists.iter_mut()) {
            if let Some(Scalar::Str(v)) = record.field(key) {
                let list = match map.get_mut(v) {
                    Some(list) => list,
                    None => map.entry(v.into()).or_default(),
                };
                list.slots.push(slot);
                list.live += 1;
            }
        }
    }

    /// Forgets a slot that `is_deleted` now reports as deleted.
    pub fn remove<R: Fields + ?Sized>(&mut self, record: &R, is_deleted: impl Fn(u32) -> bool) {
        for (key, map) in POSTED_KEYS.iter().zip(self.lists.iter_mut()) {
            if let Some(Scalar::Str(v)) = record.field(key) {
                if let Some(list) = map.get_mut(v) {
                    list.live -= 1;
                    if list.live == 0 {
                        map.remove(v);
                    } else if list.live * 2 < list.slots.len() {
                        list.slots.retain(|&s| !is_deleted(s));
                    }
                }
            }
        }
    }

    /// The slot lists that hold every vector `filter` can allow, through its most selective
    /// pinned posted key; `None` when no posted key is pinned to string values.
    fn candidates(&self, filter: &Filter) -> Option<Vec<&[u32]>> {
        self.candidates_for(filter).map(|(lists, _)| lists)
    }

    /// [`Postings::candidates`], also saying whether the lists are exactly what the filter
    /// allows (the filter is nothing but that one `$eq`/`$in`), so no record need be read.
    fn candidates_for(&self, filter: &Filter) -> Option<(Vec<&[u32]>, bool)> {
        let mut best: Option<(usize, Vec<&[u32]>, bool)> = None;
        for (key, values) in filter.pinned() {
            let Some(k) = POSTED_KEYS.iter().position(|p| *p == key) else {
                continue;
            };
            // Only string values are posted, so a key pinned to anything else cannot be used.
            let strings: Option<Vec<&str>> = values
                .iter()
                .map(|v| match v {
                    Value::Str(s) => Some(&**s),
                    _ => None,
                })
                .collect();
            let Some(mut strings) = strings else {
                continue;
            };
            strings.sort_unstable();
            strings.dedup();
            let lists: Vec<&[u32]> = strings
                .iter()
                .filter_map(|s| self.lists[k].get(*s))
                .map(|l| l.slots.as_slice())
                .collect();
            let total = lists.iter().map(|l| l.len()).sum();
            if best.as_ref().is_none_or(|(t, _, _)| total < *t) {
                let whole = matches!(filter, Filter::Eq(k, _) | Filter::In(k, _) if **k == *key);
                best = Some((total, lists, whole));
            }
        }
        best.map(|(_, lists, whole)| (lists, whole))
    }

    pub fn memory_bytes(&self) -> usize {
        self.lists
            .iter()
            .flat_map(|m| m.iter())
            .map(|(k, l)| k.len() + 64 + l.slots.capacity() * 4)
            .sum()
    }
}

/// The order vectors of one batch are stored in: by resource, then thread.
pub fn locality_key<R: Fields + ?Sized>(record: &R) -> [Option<&str>; 2] {
    POSTED_KEYS.map(|key| match record.field(key) {
        Some(Scalar::Str(s)) => Some(s),
        _ => None,
    })
}

/// What the planner chose for one query (exposed for tests and benches).
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Scan exactly the vectors in the posted slot lists.
    ExactPosted,
    /// Scan every vector, keeping those the filter allows.
    ExactAll,
    /// Graph search with this breadth.
    Graph { ef: usize },
}

/// Decides how to answer one query, read top to bottom.
pub fn plan(index: &VectorIndex, k: usize, filter: Option<&Filter>, ef: Option<usize>) -> Plan {
    let live = index.len();
    let Some(filter) = filter else {
        // No filter: small indexes are scanned, large ones searched.
        return if live <= EXACT_MAX {
            Plan::ExactAll
        } else {
            Plan::Graph {
                ef: ef.unwrap_or(EF_DEFAULT).max(k),
            }
        };
    };
    // A pinned thread or resource: its slot lists bound exactly what can pass.
    if let Some(lists) = index.postings.candidates(filter) {
        let allowed: usize = lists.iter().map(|l| l.len()).sum();
        let ef = filtered_ef(ef, k, allowed, live);
        if scan_beats_graph(allowed, live, ef) {
            return Plan::ExactPosted;
        }
        return Plan::Graph { ef };
    }
    if live <= EXACT_MAX {
        return Plan::ExactAll;
    }
    // Any other filter: estimate from an even sample of slots.
    let allowed = estimate(index, filter);
    if allowed <= EXACT_MAX {
        return Plan::ExactAll;
    }
    Plan::Graph {
        ef: filtered_ef(ef, k, allowed, live),
    }
}

/// Whether scanning the `allowed` vectors costs less than a graph search of breadth `ef`,
/// which reads about `ef / selectivity` vectors to collect `ef` allowed ones. So a resource
/// of 10,000 vectors is scanned in an index of a million (1 %) but searched in one of 100,000.
fn scan_beats_graph(allowed: usize, live: usize, ef: usize) -> bool {
    let graph_reads = ef as f64 * live as f64 / allowed.max(1) as f64;
    allowed <= EXACT_MAX || allowed as f64 <= SCAN_ADVANTAGE * graph_reads
}

/// The breadth of a filtered graph search grows as the allowed fraction falls below
/// `WIDE_SELECTIVITY`: the rarer allowed vectors are, the wider the beam that finds them.
fn filtered_ef(ef: Option<usize>, k: usize, allowed: usize, live: usize) -> usize {
    let selectivity = (allowed as f64 / live.max(1) as f64).clamp(1e-6, 1.0);
    let growth = (WIDE_SELECTIVITY / selectivity).max(1.0).sqrt();
    let base = ef.unwrap_or(EF_FILTERED).max(k);
    ((base as f64 * growth) as usize).clamp(base, EF_MAX.max(base))
}

/// How many live vectors `filter` allows, estimated from an evenly spaced sample.
fn estimate(index: &VectorIndex, filter: &Filter) -> usize {
    let slots = index.graph.slots();
    let step = (slots / SAMPLE_SIZE).max(1);
    let (mut seen, mut passed) = (0usize, 0usize);
    for slot in (0..slots).step_by(step) {
        if index.graph.is_deleted(slot as u32) {
            continue;
        }
        seen += 1;
        passed += filter.matches(&index.records.get(slot as u32)) as usize;
    }
    if seen == 0 {
        return 0;
    }
    passed * index.len() / seen
}

/// The `k` closest vectors passing `filter` (query already prepared), closest first.
pub fn search(
    index: &VectorIndex,
    query: &[f32],
    k: usize,
    filter: Option<&Filter>,
    ef: Option<usize>,
) -> Vec<Near> {
    search_traced(index, query, k, filter, ef).0
}

/// [`search`], also saying whether a graph search fell back to the exact scan.
fn search_traced(
    index: &VectorIndex,
    query: &[f32],
    k: usize,
    filter: Option<&Filter>,
    ef: Option<usize>,
) -> (Vec<Near>, bool) {
    if k == 0 || index.is_empty() {
        return (Vec::new(), false);
    }
    match plan(index, k, filter, ef) {
        Plan::ExactPosted | Plan::ExactAll => {
            (exact(index, query, k, allowed_slots(index, filter)), false)
        }
        Plan::Graph { ef } => {
            let gate = Gate::new(index, filter);
            let allows = |s: u32| gate.allows(index, s);
            let mut found = index.graph.search(query, k, ef, allows);
            // Slots not yet linked are out of the graph's reach: scan them exactly.
            let unlinked: Vec<u32> = index.graph.pending().filter(|&s| allows(s)).collect();
            if !unlinked.is_empty() {
                found.extend(exact(index, query, k, unlinked));
                found.sort_unstable();
                found.truncate(k);
            }
            // The graph may come back short when few vectors pass; the exact scan cannot.
            if found.len() < k && found.len() < index.len() {
                (exact(index, query, k, allowed_slots(index, filter)), true)
            } else {
                (found, false)
            }
        }
    }
}

/// What a graph search may collect (deleted slots aside). A pinned thread or resource becomes
/// a bitmap: one bit test per visited slot.
enum Gate<'f> {
    All,
    Bits(SlotBits),
    BitsAnd(SlotBits, &'f Filter),
    Filter(&'f Filter),
}

impl<'f> Gate<'f> {
    fn new(index: &VectorIndex, filter: Option<&'f Filter>) -> Gate<'f> {
        let Some(f) = filter else {
            return Gate::All;
        };
        match index.postings.candidates_for(f) {
            Some((lists, whole)) => {
                let bits = SlotBits::from_lists(&lists, index.graph.slots());
                if whole {
                    Gate::Bits(bits)
                } else {
                    Gate::BitsAnd(bits, f)
                }
            }
            None => Gate::Filter(f),
        }
    }

    #[inline]
    fn allows(&self, index: &VectorIndex, slot: u32) -> bool {
        let passes = |f: &Filter| f.matches(&index.records.get(slot));
        match self {
            Gate::All => true,
            Gate::Bits(bits) => bits.has(slot),
            Gate::BitsAnd(bits, f) => bits.has(slot) && passes(f),
            Gate::Filter(f) => passes(f),
        }
    }
}

/// Every live slot `filter` allows, read from the posted lists when it pins a thread or resource.
pub fn allowed_slots(index: &VectorIndex, filter: Option<&Filter>) -> Vec<u32> {
    let g = &index.graph;
    let passes =
        |s: u32| !g.is_deleted(s) && filter.is_none_or(|f| f.matches(&index.records.get(s)));
    match filter.and_then(|f| index.postings.candidates_for(f)) {
        // The lists are exactly what the filter allows: no record need be read.
        Some((lists, true)) => lists
            .into_iter()
            .flatten()
            .copied()
            .filter(|&s| !g.is_deleted(s))
            .collect(),
        Some((lists, false)) => lists
            .into_iter()
            .flatten()
            .copied()
            .filter(|&s| passes(s))
            .collect(),
        None => (0..g.slots() as u32).filter(|&s| passes(s)).collect(),
    }
}

/// The exact `k` closest of `slots` (query already prepared), closest first: the codes are
/// scanned, then [`Graph::rerank`](crate::vector::graph::Graph::rerank) measures the few that can
/// matter with their float vectors.
pub fn exact(index: &VectorIndex, query: &[f32], k: usize, slots: Vec<u32>) -> Vec<Near> {
    let g = &index.graph;
    let q = Query::new(query);
    let mut coarse: Vec<Near> = Vec::with_capacity(slots.len());
    for (i, &slot) in slots.iter().enumerate() {
        // The slots are scattered: start loading a few ahead of the one measured.
        if let Some(&ahead) = slots.get(i + PREFETCH_AHEAD) {
            g.prefetch_codes(ahead);
        }
        coarse.push(Near {
            dist: g.approx(&q, slot),
            slot,
        });
    }
    g.rerank(&q, k, &coarse)
}

/// How many slots ahead the exact scan prefetches.
const PREFETCH_AHEAD: usize = 6;

/// One bit per slot.
struct SlotBits(Vec<u64>);

impl SlotBits {
    fn from_lists(lists: &[&[u32]], slots: usize) -> SlotBits {
        let mut words = vec![0u64; slots.div_ceil(64)];
        for &s in lists.iter().flat_map(|l| l.iter()) {
            words[s as usize / 64] |= 1 << (s % 64);
        }
        SlotBits(words)
    }

    #[inline]
    fn has(&self, slot: u32) -> bool {
        self.0[slot as usize / 64] & (1 << (slot % 64)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distance::Metric;
    use crate::filter::Input;
    use crate::vector::graph::tests::clustered;

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

    /// `n` vectors; thread t0 holds every 500th, resource r{i%4}, `bucket` = i % 100.
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
                            dist: metric.distance(&q, idx.graph.vector(slot)),
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
        assert_eq!(plan(&idx, 10, Some(&f), None), Plan::ExactPosted);
        let f = filter(map(vec![(
            "$and",
            Input::List(vec![
                map(vec![("resource_id", s("r0"))]),
                map(vec![("thread_id", s("t0"))]),
            ]),
        )]));
        assert_eq!(plan(&idx, 10, Some(&f), None), Plan::ExactPosted);
    }

    #[test]
    fn large_resource_takes_the_graph_with_ef_raised_as_selectivity_falls() {
        let (idx, _) = index(20000);
        let f = filter(map(vec![("resource_id", s("r1"))]));
        assert_eq!(
            plan(&idx, 10, Some(&f), None),
            Plan::Graph { ef: EF_FILTERED }
        );
        let both = filter(map(vec![(
            "resource_id",
            map(vec![("$in", Input::List(vec![s("r1"), s("r2")]))]),
        )]));
        assert_eq!(
            plan(&idx, 10, Some(&both), Some(30)),
            Plan::Graph { ef: 30 }
        );
        assert_eq!(filtered_ef(None, 10, 500, 20000), 2 * EF_FILTERED); // 2.5 %: twice the breadth
        assert_eq!(filtered_ef(None, 50, 500, 20000), 100);
        assert_eq!(plan(&idx, 10, None, None), Plan::Graph { ef: EF_DEFAULT });
    }

    #[test]
    fn a_posted_list_is_scanned_while_that_reads_less_than_the_graph() {
        assert!(scan_beats_graph(EXACT_MAX, 100_000_000, 1));
        assert!(scan_beats_graph(
            10_000,
            1_000_000,
            filtered_ef(None, 4, 10_000, 1_000_000)
        ));
        assert!(!scan_beats_graph(
            10_000,
            100_000,
            filtered_ef(None, 4, 10_000, 100_000)
        ));
        assert!(!scan_beats_graph(100_000, 1_000_000, EF_FILTERED));
    }

    #[test]
    fn rare_unposted_filter_takes_the_exact_scan() {
        let (idx, _) = index(6000);
        let f = filter(map(vec![("bucket", map(vec![("$lt", Input::Int(2))]))]));
        assert_eq!(plan(&idx, 10, Some(&f), None), Plan::ExactAll);
        let common = filter(map(vec![("bucket", map(vec![("$lt", Input::Int(90))]))]));
        assert!(matches!(
            plan(&idx, 10, Some(&common), None),
            Plan::Graph { .. }
        ));
    }

    #[test]
    fn small_index_is_scanned() {
        let (idx, _) = index(1000);
        assert_eq!(plan(&idx, 10, None, None), Plan::ExactAll);
    }

    #[test]
    fn graph_falls_back_to_exact_when_it_finds_fewer_than_k() {
        // Half the vectors pass, far too many for the exact scan, so the graph is chosen; but
        // k asks for more than pass, the graph comes back short, and the exact scan answers.
        let (idx, data) = index(12000);
        let f = filter(map(vec![("bucket", map(vec![("$lt", Input::Int(50))]))]));
        assert!(matches!(
            plan(&idx, 7000, Some(&f), None),
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
        // seed 21 (see `index`); a quarter of the vectors pass, so the graph answers. On these
        // tight clusters a filtered walk trails an unfiltered one at the same breadth (about
        // 0.94 against 0.99 at ef 32), hence the lower bar than the unfiltered test's 0.95.
        let (idx, data) = index(20000);
        let f = filter(map(vec![("resource_id", s("r1"))]));
        assert!(matches!(plan(&idx, 10, Some(&f), None), Plan::Graph { .. }));

        let mut hits = 0;
        for q in data.iter().step_by(97).take(100) {
            let mut q = q.clone();
            Metric::Cosine.prepare(&mut q);
            let got = search(&idx, &q, 10, Some(&f), None);
            assert!(got
                .iter()
                .all(|n| idx.records.get(n.slot).field("resource_id") == Some(Scalar::Str("r1"))));
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
}
