//! The HNSW graph over slots: flat arrays, seeded levels, insert, (filtered) search, tombstones.
//!
//! A slot is a dense `u32` position. Vectors sit in one contiguous array, links in an
//! [`Adjacency`]. Levels come from a seeded generator, so the same inserts build the same
//! graph. Deleted slots stay in the graph as waypoints but are never collected.
//!
//! Each vector is kept in memory as int8 codes (see `codes`) with one scale (a quarter of the
//! bytes). Graph walks, at insert and at search, measure codes; the float vectors, kept in a
//! file (see `persist::originals`), then re-rank what a search found, so returned distances
//! are exact. Walking codes reads a quarter of the memory per step, which is what bounds a
//! walk once the vectors outgrow the caches.
//!
//! A slot may be stored before it is linked (see `insert`): a queued slot is never collected
//! by a graph walk, and the caller scans [`Graph::pending`] exactly to cover it.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Mutex;

use crate::distance::Metric;
use crate::error::{CoreError, Result};
use crate::vector::adjacency::Adjacency;
use crate::vector::codes::Codes;
/// Re-exported: searches outside the graph measure codes with it too.
pub(crate) use crate::vector::codes::Query;
pub use crate::vector::insert::{LinkPlan, Linked};
use crate::vector::persist::originals::Originals;

/// Highest level a slot may draw; far above what a billion slots would reach.
pub(crate) const MAX_LEVEL: usize = 16;
pub(crate) const NONE: u32 = u32::MAX;

/// A distance with a total order (NaN sorts last), paired with its slot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Near {
    pub dist: f32,
    pub slot: u32,
}

impl Eq for Near {}
impl Ord for Near {
    fn cmp(&self, other: &Self) -> Ordering {
        self.dist
            .total_cmp(&other.dist)
            .then(self.slot.cmp(&other.slot))
    }
}
impl PartialOrd for Near {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Marks slots seen by one search; a new generation clears it in O(1).
#[derive(Default)]
pub(crate) struct Visited {
    tags: Vec<u16>,
    generation: u16,
}

impl Visited {
    fn start(&mut self, n: usize) {
        if self.tags.len() < n {
            self.tags.resize(n, 0);
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.tags.fill(0);
            self.generation = 1;
        }
    }

    /// True the first time `slot` is seen in this generation.
    #[inline]
    fn first_visit(&mut self, slot: u32) -> bool {
        let tag = &mut self.tags[slot as usize];
        let fresh = *tag != self.generation;
        *tag = self.generation;
        fresh
    }
}

/// Construction parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    pub dim: usize,
    pub metric: Metric,
    pub m: usize,
    pub ef_construction: usize,
    pub seed: u64,
}

impl Params {
    pub fn new(
        dim: usize,
        metric: Metric,
        m: usize,
        ef_construction: usize,
        seed: u64,
    ) -> Result<Params> {
        if dim == 0 {
            return Err(CoreError::InvalidArgument(
                "dimension must be a positive integer".into(),
            ));
        }
        if !(2..=256).contains(&m) {
            return Err(CoreError::InvalidArgument(format!(
                "m must be between 2 and 256, got {m}"
            )));
        }
        if ef_construction == 0 {
            return Err(CoreError::InvalidArgument(
                "ef_construction must be positive".into(),
            ));
        }
        Ok(Params {
            dim,
            metric,
            m,
            ef_construction,
            seed,
        })
    }
}

/// The graph. `&self` methods are safe to call from many threads at once.
pub struct Graph {
    pub(crate) params: Params,
    /// Generator state for level draws (persisted, so a loaded graph keeps drawing the same).
    pub(crate) rng: u64,
    /// The float vectors, on disk but for the newest few: they only rank what a walk found.
    pub(crate) originals: Originals,
    /// The vectors as int8 codes (see [`Codes`]): the graph walk reads these, a quarter of the
    /// bytes.
    pub(crate) codes: Codes,
    pub(crate) levels: Vec<u8>,
    pub(crate) links: Adjacency,
    pub(crate) deleted: Vec<bool>,
    pub(crate) n_deleted: usize,
    /// Where every search starts (a slot of the top level), `NONE` while nothing is linked.
    pub(crate) entry: AtomicU32,
    /// Held while the entry point may move during a parallel link.
    pub(crate) entry_lock: Mutex<()>,
    /// Stored but not yet linked, in arrival order; may hold deleted slots, skipped on use.
    pub(crate) pending: VecDeque<u32>,
    /// Per slot: still in `pending`. A graph walk never collects a queued slot, even one that
    /// a parallel link has already made reachable.
    pub(crate) queued: Vec<bool>,
    /// Held by a parallel link and by a save, so a save never sees half-linked slots.
    pub(crate) linking: Mutex<()>,
    /// Counts changes to the links and the queue's head (not persisted), so a link plan made
    /// under a read lock can tell whether it still holds.
    pub(crate) epoch: u64,
    visited_pool: Mutex<Vec<Visited>>,
}

impl Graph {
    /// An empty graph; it grows without a capacity.
    pub fn new(params: Params) -> Graph {
        Graph {
            params,
            rng: params.seed ^ 0x9E37_79B9_7F4A_7C15,
            originals: Originals::new(params.dim),
            codes: Codes::default(),
            levels: Vec::new(),
            links: Adjacency::new(params.m),
            deleted: Vec::new(),
            n_deleted: 0,
            entry: AtomicU32::new(NONE),
            entry_lock: Mutex::new(()),
            pending: VecDeque::new(),
            queued: Vec::new(),
            linking: Mutex::new(()),
            epoch: 0,
            visited_pool: Mutex::new(Vec::new()),
        }
    }

    /// Slots ever inserted, deleted ones included.
    pub fn slots(&self) -> usize {
        self.levels.len()
    }

    pub fn live(&self) -> usize {
        self.slots() - self.n_deleted
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    pub fn is_deleted(&self, slot: u32) -> bool {
        self.deleted[slot as usize]
    }

    /// A copy of the float vector of `slot` (read from its file).
    pub fn vector(&self, slot: u32) -> crate::error::Result<Vec<f32>> {
        self.originals.get(slot)
    }

    /// The vector of `slot` as its codes decode (what linking measures from).
    pub(crate) fn decoded(&self, slot: u32) -> Vec<f32> {
        self.codes.decode(slot as usize, self.params.dim)
    }

    /// The entry point (`NONE` while nothing is linked).
    #[inline]
    pub(crate) fn entry(&self) -> u32 {
        self.entry.load(Relaxed)
    }

    #[inline]
    pub(crate) fn dist(&self, q: &[f32], slot: u32) -> f32 {
        let metric = self.params.metric;
        self.originals
            .with_row(slot, || self.decoded(slot), |v| metric.distance(q, v))
    }

    /// The distance to a slot's codes: close to [`Graph::dist`], at a quarter of the reads.
    #[inline]
    pub(crate) fn approx(&self, q: &Query, slot: u32) -> f32 {
        self.codes
            .distance(self.params.metric, q, slot as usize, self.params.dim)
    }

    /// Bytes held by the codes and their per-vector terms.
    pub(crate) fn codes_bytes(&self) -> usize {
        let c = &self.codes;
        c.codes.capacity()
            + 4 * [&c.scales, &c.norms, &c.residuals, &c.norm_gaps]
                .iter()
                .map(|v| v.capacity())
                .sum::<usize>()
    }

    /// Starts loading a slot's codes.
    #[inline]
    pub(crate) fn prefetch_codes(&self, slot: u32) {
        prefetch(self.codes.of(slot as usize, self.params.dim));
    }

    /// The exact `k` nearest of slots measured on their codes (`(code distance, slot)`),
    /// nearest first. Only slots whose error bound reaches the `k`-th best upper bound are
    /// measured with their float vectors, nearest lower bound first until none can beat the
    /// `k`-th: the same answer as measuring them all.
    pub(crate) fn rerank(&self, q: &Query, k: usize, coarse: &[Near]) -> Vec<Near> {
        if coarse.is_empty() || k == 0 {
            return Vec::new();
        }
        let metric = self.params.metric;
        let bound = |c: &Near| self.codes.bound(metric, q, c.slot as usize);
        let mut uppers: Vec<f32> = coarse.iter().map(|c| c.dist + bound(c)).collect();
        let kth = k.min(uppers.len()) - 1;
        let cut = *uppers.select_nth_unstable_by(kth, |a, b| a.total_cmp(b)).1;
        let mut shortlist: Vec<Near> = coarse
            .iter()
            .map(|c| Near {
                dist: c.dist - bound(c),
                slot: c.slot,
            })
            .filter(|lower| lower.dist <= cut)
            .collect();
        shortlist.sort_unstable();
        let mut heap: BinaryHeap<Near> = BinaryHeap::with_capacity(k + 1);
        for lower in &shortlist {
            if heap.len() == k && heap.peek().is_some_and(|w| lower.dist > w.dist) {
                break;
            }
            let near = Near {
                dist: self.dist(q.v, lower.slot),
                slot: lower.slot,
            };
            if heap.len() < k {
                heap.push(near);
            } else if heap.peek().is_some_and(|w| near < *w) {
                heap.pop();
                heap.push(near);
            }
        }
        heap.into_sorted_vec()
    }

    pub(crate) fn draw_level(&mut self) -> usize {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let u = ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64; // (0, 1]
        let mult = 1.0 / (self.params.m as f64).ln();
        ((-u.ln() * mult) as usize).min(MAX_LEVEL)
    }

    pub(crate) fn checkout_visited(&self) -> Visited {
        self.visited_pool
            .lock()
            .map(|mut p| p.pop())
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    pub(crate) fn return_visited(&self, v: Visited) {
        if let Ok(mut pool) = self.visited_pool.lock() {
            pool.push(v);
        }
    }

    /// Makes room for `additional` more slots: exactly for a large batch, with the usual
    /// doubling for small ones (so many small batches stay linear).
    pub fn reserve(&mut self, additional: usize) {
        fn grow<T>(v: &mut Vec<T>, more: usize, exact: bool) {
            if exact {
                v.reserve_exact(more);
            } else {
                v.reserve(more);
            }
        }
        let exact = additional >= self.slots() / 4;
        let before = self.codes.codes.as_ptr();
        self.links.reserve(additional, exact);
        grow(&mut self.levels, additional, exact);
        grow(&mut self.deleted, additional, exact);
        grow(&mut self.queued, additional, exact);
        self.codes.reserve(additional, self.params.dim, exact);
        if self.codes.codes.as_ptr() != before {
            self.advise_huge_pages();
        }
    }

    /// Asks the kernel to back the code and link arrays with huge pages: a search touches
    /// codes all over the array, and 4 KiB pages make nearly every touch a TLB miss.
    pub(crate) fn advise_huge_pages(&self) {
        advise_huge_pages(self.links.level0_buffer());
        advise_huge_pages(&self.codes.codes);
    }

    /// Greedy walk with ef = 1 from `top` down to `stop + 1`; returns the entry set for `stop`.
    pub(crate) fn greedy_descent(
        &self,
        q: &Query,
        start: u32,
        top: usize,
        stop: usize,
    ) -> Vec<Near> {
        let mut cur = Near {
            dist: self.approx(q, start),
            slot: start,
        };
        for level in (stop + 1..=top).rev() {
            let mut improved = true;
            while improved {
                improved = false;
                for n in self.links.list(cur.slot, level) {
                    let d = self.approx(q, n);
                    if d < cur.dist {
                        cur = Near { dist: d, slot: n };
                        improved = true;
                    }
                }
            }
        }
        vec![cur]
    }

    /// Best-first search of one layer. Every reachable slot may be traversed, but only those
    /// for which `collect` holds enter the result (at most `ef`, nearest first).
    pub(crate) fn search_layer<F: Fn(u32) -> bool>(
        &self,
        q: &Query,
        entry: &[Near],
        ef: usize,
        level: usize,
        visited: &mut Visited,
        collect: F,
    ) -> Vec<Near> {
        visited.start(self.slots());
        let mut candidates: BinaryHeap<Reverse<Near>> = BinaryHeap::with_capacity(ef * 2);
        let mut results: BinaryHeap<Near> = BinaryHeap::with_capacity(ef + 1);
        let mut fresh: Vec<u32> = Vec::with_capacity(self.links.m0());
        for &e in entry {
            if visited.first_visit(e.slot) {
                candidates.push(Reverse(e));
                if collect(e.slot) {
                    results.push(e);
                }
            }
        }
        while results.len() > ef {
            results.pop();
        }
        while let Some(Reverse(c)) = candidates.pop() {
            let bound = if results.len() >= ef {
                results.peek().map_or(f32::INFINITY, |w| w.dist)
            } else {
                f32::INFINITY
            };
            if c.dist > bound {
                break;
            }
            if let Some(Reverse(next)) = candidates.peek() {
                prefetch(self.links.block(next.slot, level));
            }
            // Mark the unseen neighbours, start loading their vectors, then measure them.
            fresh.clear();
            fresh.extend(
                self.links
                    .list(c.slot, level)
                    .filter(|&n| visited.first_visit(n)),
            );
            for &n in &fresh {
                self.prefetch_codes(n);
            }
            for &n in &fresh {
                let d = self.approx(q, n);
                let full = results.len() >= ef;
                let worst = if full {
                    results.peek().map_or(f32::INFINITY, |w| w.dist)
                } else {
                    f32::INFINITY
                };
                if d < worst {
                    let near = Near { dist: d, slot: n };
                    candidates.push(Reverse(near));
                    if collect(n) {
                        results.push(near);
                        if results.len() > ef {
                            results.pop();
                        }
                    }
                }
            }
        }
        results.into_sorted_vec()
    }

    /// The `k` nearest live slots allowed by `allow`, nearest first, with graph distances.
    /// `query` must already be prepared (see [`Metric::prepare`]).
    pub fn search<F: Fn(u32) -> bool>(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        allow: F,
    ) -> Vec<Near> {
        let entry = self.entry();
        if entry == NONE || k == 0 {
            return Vec::new();
        }
        let top = self.levels[entry as usize] as usize;
        let q = Query::new(query);
        let ep = self.greedy_descent(&q, entry, top, 0);
        let mut visited = self.checkout_visited();
        let found = self.search_layer(&q, &ep, ef.max(k), 0, &mut visited, |s| {
            !self.deleted[s as usize] && !self.queued[s as usize] && allow(s)
        });
        self.return_visited(visited);
        self.rerank(&q, k, &found)
    }

    /// Tombstones a slot: still a waypoint, never a result. Returns false if already deleted.
    pub fn mark_deleted(&mut self, slot: u32) -> bool {
        let d = &mut self.deleted[slot as usize];
        if *d {
            return false;
        }
        *d = true;
        self.n_deleted += 1;
        true
    }

    /// A graph from its saved arrays (see `persist`), with a fresh visited-list pool.
    #[allow(clippy::too_many_arguments)] // one argument per saved array
    pub(crate) fn from_parts(
        params: Params,
        rng: u64,
        originals: Originals,
        codes: Codes,
        levels: Vec<u8>,
        links: Adjacency,
        deleted: Vec<bool>,
        entry: u32,
        pending: VecDeque<u32>,
    ) -> Graph {
        let n_deleted = deleted.iter().filter(|d| **d).count();
        let mut queued = vec![false; levels.len()];
        for &s in &pending {
            if let Some(q) = queued.get_mut(s as usize) {
                *q = true;
            }
        }
        let graph = Graph {
            params,
            rng,
            originals,
            codes,
            levels,
            links,
            deleted,
            n_deleted,
            entry: AtomicU32::new(entry),
            entry_lock: Mutex::new(()),
            pending,
            queued,
            linking: Mutex::new(()),
            epoch: 0,
            visited_pool: Mutex::new(Vec::new()),
        };
        graph.advise_huge_pages();
        graph
    }

    /// Checks that every link points at a slot and every count fits (used after a load).
    pub(crate) fn validate(&self) -> std::result::Result<(), String> {
        let n = self.slots();
        let (m, m0) = (self.params.m, self.links.m0());
        if self.originals.len() != n
            || self.codes.scales.len() != n
            || self.codes.codes.len() != n * self.params.dim
            || self.links.slots() != n
        {
            return Err("array lengths disagree".into());
        }
        if self.deleted.len() != n {
            return Err("array lengths disagree".into());
        }
        let mut queued = vec![false; n];
        for &s in &self.pending {
            if s as usize >= n || std::mem::replace(&mut queued[s as usize], true) {
                return Err("bad pending slot".into());
            }
        }
        let linked = n - self.pending.len();
        let entry = self.entry();
        if (linked == 0) != (entry == NONE)
            || (linked > 0 && (entry as usize >= n || queued[entry as usize]))
        {
            return Err("bad entry point".into());
        }
        for s in 0..n {
            let level = self.levels[s] as usize;
            if level > MAX_LEVEL || self.links.upper_len(s) != level * (m + 1) {
                return Err("bad level".into());
            }
            for l in 0..=level {
                let cap = if l == 0 { m0 } else { m };
                let count = self.links.block(s as u32, l)[0].load(Relaxed) as usize;
                if count > cap || self.links.list(s as u32, l).any(|x| x as usize >= n) {
                    return Err("bad link".into());
                }
            }
        }
        Ok(())
    }
}

/// Advises huge pages for the whole capacity of `buffer` (best before it is filled).
#[cfg(target_os = "linux")]
pub(crate) fn advise_huge_pages<T>(buffer: &Vec<T>) {
    const HUGE: usize = 2 << 20;
    let start = buffer.as_ptr() as usize;
    let end = start + buffer.capacity() * std::mem::size_of::<T>();
    let (from, to) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
    if to > from {
        // Advice only: failure leaves ordinary pages, which are correct, just slower.
        unsafe {
            libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn advise_huge_pages<T>(_buffer: &Vec<T>) {}

/// Cache lines of a vector requested ahead of its distance computation.
const PREFETCH_LINES: usize = 6;

#[inline(always)]
fn prefetch<T>(v: &[T]) {
    prefetch_lines(v, PREFETCH_LINES);
}

/// Requests the first `max_lines` cache lines of `v`.
#[inline(always)]
pub(crate) fn prefetch_lines<T>(v: &[T], max_lines: usize) {
    #[cfg(target_arch = "x86_64")]
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let lines = std::mem::size_of_val(v).div_ceil(64).min(max_lines);
        for line in 0..lines {
            _mm_prefetch((v.as_ptr() as *const i8).add(line * 64), _MM_HINT_T0);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (v, max_lines);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Seeded clustered data: `clusters` Gaussian-ish centres, points scattered around them.
    pub(crate) fn clustered(seed: u64, n: usize, dim: usize, clusters: usize) -> Vec<Vec<f32>> {
        let mut s = seed;
        let mut next = move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let centres: Vec<Vec<f32>> = (0..clusters)
            .map(|_| (0..dim).map(|_| next()).collect())
            .collect();
        (0..n)
            .map(|i| {
                centres[i % clusters]
                    .iter()
                    .map(|c| c + 0.35 * next())
                    .collect()
            })
            .collect()
    }

    pub(crate) fn exact(g: &Graph, q: &[f32], k: usize) -> Vec<u32> {
        let mut all: Vec<Near> = (0..g.slots() as u32)
            .filter(|&s| !g.is_deleted(s))
            .map(|s| Near {
                dist: g.dist(q, s),
                slot: s,
            })
            .collect();
        all.sort_unstable();
        all.into_iter().take(k).map(|n| n.slot).collect()
    }

    fn build(metric: Metric, data: &[Vec<f32>]) -> Graph {
        let mut g = Graph::new(Params::new(data[0].len(), metric, 16, 200, 42).unwrap());
        for v in data {
            g.insert(v);
        }
        g
    }

    fn prepared(metric: Metric, v: &[f32]) -> Vec<f32> {
        let mut q = v.to_vec();
        metric.prepare(&mut q);
        q
    }

    #[test]
    fn recall_at_10_is_at_least_095_on_clustered_data() {
        // seed 11 for data, 12 for queries, graph seed 42.
        for metric in [Metric::Cosine, Metric::Euclidean] {
            let data = clustered(11, 3000, 32, 30);
            let queries = clustered(12, 100, 32, 30);
            let g = build(metric, &data);
            let mut hits = 0;
            for q in &queries {
                let q = prepared(metric, q);
                let truth = exact(&g, &q, 10);
                let got: Vec<u32> = g
                    .search(&q, 10, 64, |_| true)
                    .iter()
                    .map(|n| n.slot)
                    .collect();
                hits += truth.iter().filter(|t| got.contains(t)).count();
            }
            let recall = hits as f64 / (queries.len() * 10) as f64;
            assert!(recall >= 0.95, "{metric:?} recall {recall}");
        }
    }

    #[test]
    fn same_seed_builds_the_same_graph() {
        let data = clustered(5, 500, 8, 10);
        let a = build(Metric::Cosine, &data);
        let b = build(Metric::Cosine, &data);
        assert_eq!(a.levels, b.levels);
        assert_eq!(
            a.links.level0_words().collect::<Vec<_>>(),
            b.links.level0_words().collect::<Vec<_>>()
        );
        assert_eq!(a.entry(), b.entry());
    }

    #[test]
    fn deleted_slots_are_never_returned() {
        // seed 3
        let data = clustered(3, 800, 16, 8);
        let mut g = build(Metric::Euclidean, &data);
        for s in (0..800).step_by(3) {
            assert!(g.mark_deleted(s));
        }
        assert!(!g.mark_deleted(0));
        for q in data.iter().take(50) {
            for n in g.search(q, 10, 50, |_| true) {
                assert!(n.slot % 3 != 0);
            }
        }
    }

    #[test]
    fn filtered_search_collects_only_allowed_slots() {
        let data = clustered(9, 600, 16, 6);
        let g = build(Metric::Cosine, &data);
        let q = prepared(Metric::Cosine, &data[1]);
        let got = g.search(&q, 10, 100, |s| s % 7 == 0);
        assert_eq!(got.len(), 10);
        assert!(got.iter().all(|n| n.slot % 7 == 0));
    }

    #[test]
    fn a_plan_outdated_by_another_link_or_a_delete_writes_nothing_wrong() {
        // seed 14
        let data = clustered(14, 200, 8, 4);
        let mut g = Graph::new(Params::new(8, Metric::Cosine, 8, 40, 1).unwrap());
        for v in &data {
            g.push(v);
        }
        g.link_pending(100);
        let stale = g.plan_link().unwrap();
        assert_eq!(g.link_pending(1), 1);
        let before: Vec<u32> = g.links.level0_words().collect();
        assert_eq!(g.apply_link(stale), Linked::Stale);
        assert_eq!(g.links.level0_words().collect::<Vec<_>>(), before);
        let plan = g.plan_link().unwrap();
        let slot = g.pending().next().unwrap();
        assert!(g.mark_deleted(slot));
        assert_eq!(g.apply_link(plan), Linked::Dropped);
        assert_eq!(g.links.level0_words().collect::<Vec<_>>(), before);
        assert_eq!(g.pending().count(), 98);
        assert_eq!(g.link_pending(usize::MAX), 98);
        assert!(g.plan_link().is_none());
        assert!(g.validate().is_ok());
    }

    #[test]
    fn empty_graph_and_zero_k_return_nothing() {
        let g = Graph::new(Params::new(4, Metric::Cosine, 16, 200, 0).unwrap());
        assert!(g.search(&[1.0, 0.0, 0.0, 0.0], 5, 10, |_| true).is_empty());
        assert!(g.validate().is_ok());
    }

    #[test]
    fn bad_params_are_invalid_arguments() {
        assert!(Params::new(0, Metric::Cosine, 16, 200, 0).is_err());
        assert!(Params::new(4, Metric::Cosine, 1, 200, 0).is_err());
        assert!(Params::new(4, Metric::Cosine, 16, 0, 0).is_err());
    }
}
