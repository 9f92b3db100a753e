//! The search of the graph: the greedy descent through the upper levels, the best-first walk
//! of one level that collects only allowed slots, and the re-rank that turns code distances
//! into exact ones.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::vector::graph::{Graph, Query, NONE};
use crate::vector::prefetch::prefetch;

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

/// A [`Near`] in one integer that orders as it does (by distance, then slot), so the walk's
/// heaps compare with one instruction: the distance's bits made to sort as unsigned (the
/// order of `f32::total_cmp`) above the slot.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Packed(u64);

impl From<Near> for Packed {
    #[inline]
    fn from(n: Near) -> Packed {
        let bits = n.dist.to_bits();
        let ordered = if bits >> 31 == 1 {
            !bits
        } else {
            bits | 1 << 31
        };
        Packed((ordered as u64) << 32 | n.slot as u64)
    }
}

impl Packed {
    #[inline]
    fn near(self) -> Near {
        let ordered = (self.0 >> 32) as u32;
        let bits = if ordered >> 31 == 1 {
            ordered & !(1 << 31)
        } else {
            !ordered
        };
        Near {
            dist: f32::from_bits(bits),
            slot: self.0 as u32,
        }
    }
}

/// Marks slots seen by one search; a new generation clears it in O(1).
#[derive(Default)]
pub(crate) struct Visited {
    tags: Vec<u16>,
    generation: u16,
}

impl Visited {
    pub(crate) fn start(&mut self, n: usize) {
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
    pub(crate) fn first_visit(&mut self, slot: u32) -> bool {
        let tag = &mut self.tags[slot as usize];
        let fresh = *tag != self.generation;
        *tag = self.generation;
        fresh
    }
}

impl Graph {
    /// The exact `k` nearest of slots measured on their codes (`(code distance, slot)`),
    /// nearest first. Only slots whose error bound, scaled by `share` (1 for the whole of it),
    /// reaches the `k`-th best upper bound are measured with their float vectors (see
    /// [`Graph::measure`]): at `share` 1, the same answer as measuring them all.
    pub(crate) fn rerank(&self, q: &Query, k: usize, coarse: &[Near], share: f32) -> Vec<Near> {
        if coarse.is_empty() || k == 0 {
            return Vec::new();
        }
        let bound = |slot: u32| share * self.bound(q, slot);
        let mut uppers: Vec<f32> = coarse.iter().map(|c| c.dist + bound(c.slot)).collect();
        let kth = k.min(uppers.len()) - 1;
        let cut = *uppers.select_nth_unstable_by(kth, |a, b| a.total_cmp(b)).1;
        let shortlist: Vec<Near> = coarse
            .iter()
            .map(|c| Near {
                dist: c.dist - bound(c.slot),
                slot: c.slot,
            })
            .filter(|lower| lower.dist <= cut)
            .collect();
        self.measure(q, k, shortlist)
    }

    /// The share of a code distance's error bound that the re-rank of a walk's candidates
    /// allows for. The error is a sum of `dim` rounding terms of independent signs, so it
    /// stays within three standard deviations, `3 / sqrt(dim)` of the bound, all but about
    /// once in a thousand; a walk is approximate anyway, and its scores stay exact.
    pub(crate) fn likely_share(&self) -> f32 {
        (3.0 / (self.params.dim as f32).sqrt()).min(1.0)
    }

    /// The exact `k` nearest of `shortlist` (lower bounds of their distances, every slot
    /// that can be among the `k` nearest): measured with their float vectors, nearest lower
    /// bound first until none can beat the `k`-th.
    pub(crate) fn measure(&self, q: &Query, k: usize, mut shortlist: Vec<Near>) -> Vec<Near> {
        debug_assert_eq!(
            q.v.len(),
            self.params.dim,
            "a query made of codes has no floats"
        );
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
        self.walk_layer(q, entry, ef, level, visited, collect)
    }

    /// [`Graph::search_layer`] on a visited list already started: slots marked in it are
    /// neither traversed nor collected.
    pub(crate) fn walk_layer<F: Fn(u32) -> bool>(
        &self,
        q: &Query,
        entry: &[Near],
        ef: usize,
        level: usize,
        visited: &mut Visited,
        collect: F,
    ) -> Vec<Near> {
        let mut candidates: BinaryHeap<Reverse<Packed>> = BinaryHeap::with_capacity(ef * 2);
        let mut results: BinaryHeap<Packed> = BinaryHeap::with_capacity(ef + 1);
        let mut fresh: Vec<u32> = Vec::with_capacity(self.links.m0());
        for &e in entry {
            if visited.first_visit(e.slot) {
                candidates.push(Reverse(Packed::from(e)));
                if collect(e.slot) {
                    results.push(Packed::from(e));
                }
            }
        }
        while results.len() > ef {
            results.pop();
        }
        while let Some(Reverse(c)) = candidates.pop() {
            let c = c.near();
            let bound = if results.len() >= ef {
                results.peek().map_or(f32::INFINITY, |w| w.near().dist)
            } else {
                f32::INFINITY
            };
            if c.dist > bound {
                break;
            }
            if let Some(Reverse(next)) = candidates.peek() {
                prefetch(self.links.block(next.near().slot, level));
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
                    results.peek().map_or(f32::INFINITY, |w| w.near().dist)
                } else {
                    f32::INFINITY
                };
                if d < worst {
                    let near = Packed::from(Near { dist: d, slot: n });
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
        results
            .into_sorted_vec()
            .into_iter()
            .map(Packed::near)
            .collect()
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
        self.rerank(&q, k, &found, self.likely_share())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{Near, Packed};
    use crate::distance::Metric;
    use crate::vector::graph::tests::{build, clustered, exact, prepared};

    fn near(bits: u32, slot: u32) -> Near {
        Near {
            dist: f32::from_bits(bits),
            slot,
        }
    }

    proptest! {
        #[test]
        fn packed_nears_order_and_round_trip_as_nears(a in any::<(u32, u32)>(), b in any::<(u32, u32)>()) {
            let (x, y) = (near(a.0, a.1), near(b.0, b.1));
            prop_assert_eq!(Packed::from(x).cmp(&Packed::from(y)), x.cmp(&y));
            let back = Packed::from(x).near();
            prop_assert_eq!((back.dist.to_bits(), back.slot), (a.0, a.1));
        }
    }

    #[test]
    fn packed_nears_order_signed_zeros_infinities_and_nans_as_total_cmp() {
        let dists = [
            f32::NEG_INFINITY,
            -1.0,
            -0.0,
            0.0,
            1e-30,
            2.5,
            f32::INFINITY,
            f32::NAN,
            -f32::NAN,
        ];
        for &x in &dists {
            for &y in &dists {
                let (a, b) = (Near { dist: x, slot: 7 }, Near { dist: y, slot: 3 });
                assert_eq!(
                    Packed::from(a).cmp(&Packed::from(b)),
                    a.cmp(&b),
                    "{x} against {y}"
                );
            }
        }
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
}
