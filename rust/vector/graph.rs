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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Mutex;

use crate::distance::Metric;
use crate::error::{CoreError, Result};
use crate::vector::adjacency::Adjacency;
use crate::vector::breadth::Breadths;
use crate::vector::codes::Codes;
/// Re-exported: searches outside the graph measure codes with it too.
pub(crate) use crate::vector::codes::Query;
pub use crate::vector::insert::{LinkPlan, Linked};
use crate::vector::persist::originals::Originals;
use crate::vector::prefetch::prefetch;
pub(crate) use crate::vector::prefetch::{advise_huge_pages, prefetch_lines};
pub use crate::vector::walk::Near;
pub(crate) use crate::vector::walk::Visited;

/// Highest level a slot may draw; far above what a billion slots would reach.
pub(crate) const MAX_LEVEL: usize = 16;
pub(crate) const NONE: u32 = u32::MAX;

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
    /// Held by a parallel link and by a save, so a save never sees half-linked slots. It
    /// holds the slots parallel links finished: linked, though still in `pending` until
    /// [`Graph::finish_batch`] (a save records them as linked).
    pub(crate) linking: Mutex<Vec<u32>>,
    /// Counts changes to the links and the queue's head (not persisted), so a link plan made
    /// under a read lock can tell whether it still holds.
    pub(crate) epoch: u64,
    pub(crate) visited_pool: Mutex<Vec<Visited>>,
    /// The default search breadths measured on this graph (see `breadth`).
    pub(crate) breadths: Breadths,
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
            linking: Mutex::new(Vec::new()),
            epoch: 0,
            visited_pool: Mutex::new(Vec::new()),
            breadths: Breadths::default(),
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

    /// A slot's codes as a query of code distances (see [`Codes::query`]).
    pub(crate) fn code_query(&self, slot: u32) -> Query<'static> {
        self.codes.query(slot as usize, self.params.dim)
    }

    /// The distance to a slot's codes: close to [`Graph::dist`], at a quarter of the reads.
    #[inline]
    pub(crate) fn approx(&self, q: &Query, slot: u32) -> f32 {
        self.codes
            .distance(self.params.metric, q, slot as usize, self.params.dim)
    }

    /// How far [`Graph::approx`] can be from [`Graph::dist`].
    #[inline]
    pub(crate) fn bound(&self, q: &Query, slot: u32) -> f32 {
        self.codes.bound(self.params.metric, q, slot as usize)
    }

    /// Bytes held by the codes and their per-vector terms.
    pub(crate) fn codes_bytes(&self) -> usize {
        let c = &self.codes;
        c.bytes()
            + 4 * [&c.scales, &c.norms, &c.residuals, &c.norm_gaps]
                .iter()
                .map(|v| v.capacity())
                .sum::<usize>()
    }

    /// Starts loading a slot's codes and its scale.
    #[inline]
    pub(crate) fn prefetch_codes(&self, slot: u32) {
        prefetch(self.codes.of(slot as usize, self.params.dim));
        prefetch(&self.codes.scales[slot as usize..slot as usize + 1]);
    }

    /// Starts loading what [`Graph::bound`] reads of a slot.
    #[inline]
    pub(crate) fn prefetch_bound(&self, slot: u32) {
        let (s, c) = (slot as usize, &self.codes);
        prefetch(&c.residuals[s..s + 1]);
        prefetch(&c.norms[s..s + 1]);
        if self.params.metric == crate::distance::Metric::Euclidean {
            prefetch(&c.norm_gaps[s..s + 1]);
        }
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
            linking: Mutex::new(Vec::new()),
            epoch: 0,
            visited_pool: Mutex::new(Vec::new()),
            breadths: Breadths::default(),
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
            || self.codes.len() != n * self.params.dim
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

    pub(crate) fn build(metric: Metric, data: &[Vec<f32>]) -> Graph {
        let mut g = Graph::new(Params::new(data[0].len(), metric, 16, 200, 42).unwrap());
        for v in data {
            g.insert(v);
        }
        g
    }

    pub(crate) fn prepared(metric: Metric, v: &[f32]) -> Vec<f32> {
        let mut q = v.to_vec();
        metric.prepare(&mut q);
        q
    }

    #[test]
    fn a_slot_s_code_query_measures_codes_as_its_decoded_vector_does() {
        for metric in [Metric::Cosine, Metric::Euclidean, Metric::DotProduct] {
            let data = clustered(21, 60, 384, 5);
            let mut g = Graph::new(Params::new(384, metric, 8, 40, 3).unwrap());
            for v in &data {
                g.push(&prepared(metric, v));
            }
            for a in (0..60).step_by(7) {
                let decoded = g.decoded(a);
                let (by_code, by_floats) = (g.code_query(a), Query::new(&decoded));
                assert!(by_code.v.is_empty());
                // Both sum terms of the size of the squared norms: rounding grows with them.
                let size = 1.0 + 2.0 * by_floats.norm * by_floats.norm;
                for b in 0..60 {
                    let (x, y) = (g.approx(&by_code, b), g.approx(&by_floats, b));
                    assert!(
                        (x - y).abs() <= 1e-5 * size,
                        "{metric:?} {a}-{b}: {x} vs {y}"
                    );
                }
            }
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
