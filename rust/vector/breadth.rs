//! The default breadth of an unfiltered graph search, measured on the graph itself.
//!
//! How wide a beam reaches a given recall depends on the data (its local intrinsic dimension,
//! how clustered it is), not only on the graph's size: a fixed default under-searches some
//! data and over-searches other. So the first default search of `k` hits measures it (or a
//! save, for [`DEFAULT_K`], so that a reopened index carries it in its file): stored vectors
//! spread over the slots are each searched for as if they were not stored (they are neither
//! traversed nor collected, so the walk must find their neighbours without them, as it must
//! for a new query), and their true `k` neighbours are known exactly. The breadth chosen is
//! the narrowest of a ladder at which the probes' recall, less [`MARGIN`] standard errors of
//! its estimate, still reaches [`TARGET_RECALL`]. It is measured again once the linked graph
//! grew or shrank by half.
//!
//! A held-out probe is a query drawn from the data's own distribution, and usually a little
//! harder to answer than a new one (its neighbours' links were pruned with it present): over
//! seven clustered and uniform shapes, at breadths 16-256, its recall was from 0.004 above to
//! 0.09 under that of new queries from the same mixture. Queries off the data (a stored
//! vector plus noise as long as the vector) are harder than the probes, and can need a wider
//! beam than the default.

use std::sync::Mutex;

use crate::vector::graph::{Graph, Near, Query, NONE};

/// The hits a search returns unless asked for another number: a save measures the default
/// breadth for it, so the file holds it.
pub const DEFAULT_K: usize = 10;
/// The recall@k promised to a default search, reached by the probes' recall less the margin.
pub const TARGET_RECALL: f64 = 0.95;
/// Standard errors of the probes' mean recall kept between it and [`TARGET_RECALL`], so that
/// the chosen breadth does not reach the target only by the luck of the probes drawn.
pub const MARGIN: f64 = 2.0;
/// Vectors searched for to measure the breadth (at most a quarter of the linked ones): at
/// recall 0.95 the standard error of their mean is about 0.005, so the margin costs about one
/// rung.
pub const PROBES: usize = 192;
/// Fewest probes worth measuring with; a graph with under four times as many linked vectors
/// keeps the fallback breadth.
const MIN_PROBES: usize = 64;
/// Breadths tried, narrowest first (each at least `k`), about an eighth apart: a rung wider
/// than needed costs about that much more time per search.
const LADDER: [usize; 30] = [
    16, 18, 20, 22, 24, 27, 30, 34, 38, 42, 48, 54, 60, 68, 76, 86, 96, 108, 120, 136, 152, 172,
    192, 216, 240, 272, 304, 344, 384, 432,
];
/// The breadth used past the ladder.
const WIDEST: usize = 512;
/// Above this many vector components (linked slots x dimension) the probes' true neighbours
/// come from a search of breadth `TRUTH_EF` instead of a scan of every vector.
const EXACT_TRUTH_MAX: usize = 1 << 23;
const TRUTH_EF: usize = 1024;
/// A measure holds while the linked graph stays within this factor of the size it had.
const REMEASURE_FACTOR: f64 = 1.5;

/// What was measured, per `k`.
#[derive(Debug, Clone, Copy)]
struct Measured {
    k: usize,
    linked: usize,
    ef: usize,
}

/// The measured breadths of one graph, and how many times they changed (so a save knows
/// whether its file holds the latest).
#[derive(Default)]
pub(crate) struct Breadths(Mutex<(Vec<Measured>, u64)>);

/// One measured breadth as the index file keeps it: `k`, the linked slots it was measured
/// on, and the breadth.
pub(crate) type Saved = [u64; 3];

impl Graph {
    /// The breadth a default search of `k` hits uses: measured (see the module doc) on first
    /// use and once the linked graph changed size by half; `fallback` while the graph is too
    /// small to probe.
    pub(crate) fn default_ef(&self, k: usize, fallback: usize) -> usize {
        let linked = self.slots() - self.pending.len();
        let fits = |m: &Measured| {
            m.k == k
                && (linked as f64) <= m.linked as f64 * REMEASURE_FACTOR
                && (linked as f64) * REMEASURE_FACTOR >= m.linked as f64
        };
        if let Some(m) = self.lock_breadths().0.iter().find(|m| fits(m)) {
            return m.ef;
        }
        let Some(ef) = self.measure_ef(k) else {
            return fallback.max(k);
        };
        let (measured, changes) = &mut *self.lock_breadths();
        measured.retain(|m| m.k != k);
        measured.push(Measured { k, linked, ef });
        *changes += 1;
        ef
    }

    /// The breadths measured so far, and a count that grows with each new measure.
    pub(crate) fn measured_breadths(&self) -> (Vec<Saved>, u64) {
        let (measured, changes) = &*self.lock_breadths();
        let list = measured
            .iter()
            .map(|m| [m.k as u64, m.linked as u64, m.ef as u64])
            .collect();
        (list, *changes)
    }

    /// Takes breadths measured before (read back from an index file).
    pub(crate) fn restore_breadths(&self, saved: &[Saved]) {
        self.lock_breadths().0 = saved
            .iter()
            .map(|&[k, linked, ef]| Measured {
                k: k as usize,
                linked: linked as usize,
                ef: ef as usize,
            })
            .collect();
    }

    fn lock_breadths(&self) -> std::sync::MutexGuard<'_, (Vec<Measured>, u64)> {
        self.breadths
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The narrowest breadth of the ladder reaching [`TARGET_RECALL`] over the probes, or
    /// `None` when there are too few linked slots to probe.
    fn measure_ef(&self, k: usize) -> Option<usize> {
        let entry = self.entry();
        let usable = |s: u32| !self.deleted[s as usize] && !self.queued[s as usize];
        let linked: Vec<u32> = (0..self.slots() as u32).filter(|&s| usable(s)).collect();
        let count = PROBES.min(linked.len() / 4);
        if entry == NONE || count < MIN_PROBES || linked.len() <= 2 * k {
            return None;
        }
        let step = linked.len() / count;
        let probes: Vec<u32> = (0..count)
            .map(|i| linked[i * step + step / 2])
            .filter(|&p| p != entry)
            .collect();
        // A probe whose vector cannot be read leaves the breadth unmeasured (the default stays).
        let vectors: Vec<Vec<f32>> = probes
            .iter()
            .map(|&p| self.vector(p))
            .collect::<crate::error::Result<_>>()
            .ok()?;
        let exact_truth = linked.len() * self.params.dim <= EXACT_TRUTH_MAX;
        let truths: Vec<Vec<u32>> = probes
            .iter()
            .zip(&vectors)
            .map(|(&p, v)| {
                let q = Query::new(v);
                let found = if exact_truth {
                    // The codes of every other slot, then the float vectors of the few that
                    // can matter: the exact answer.
                    let coarse: Vec<Near> = linked
                        .iter()
                        .filter(|&&s| s != p)
                        .map(|&s| Near {
                            dist: self.approx(&q, s),
                            slot: s,
                        })
                        .collect();
                    self.rerank(&q, k, &coarse)
                } else {
                    self.search_without(&q, p, k, TRUTH_EF.max(k))
                };
                found.into_iter().map(|n| n.slot).collect()
            })
            .collect();
        // The probes' mean recall at a breadth, less `MARGIN` standard errors of it.
        let assured_recall = |ef: usize| {
            let recalls: Vec<f64> = probes
                .iter()
                .zip(&vectors)
                .zip(&truths)
                .filter(|(_, truth)| !truth.is_empty())
                .map(|((&p, v), truth)| {
                    let got = self.search_without(&Query::new(v), p, k, ef);
                    let hits = truth.iter().filter(|t| got.iter().any(|n| n.slot == **t));
                    hits.count() as f64 / truth.len() as f64
                })
                .collect();
            lower_bound(&recalls)
        };
        // Recall grows with the breadth: binary search for the first rung that reaches it.
        let rungs: Vec<usize> = LADDER.iter().map(|&e| e.max(k)).collect();
        let (mut lo, mut hi) = (0, rungs.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if assured_recall(rungs[mid]) >= TARGET_RECALL {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(rungs.get(lo).copied().unwrap_or(WIDEST.max(k)))
    }

    /// The `k` nearest live linked slots to `q` other than `skip`, found by a walk that never
    /// steps on `skip` (as if it were not stored), with exact distances.
    fn search_without(&self, q: &Query, skip: u32, k: usize, ef: usize) -> Vec<Near> {
        let entry = self.entry();
        let mut cur = Near {
            dist: self.approx(q, entry),
            slot: entry,
        };
        for level in (1..=self.levels[entry as usize] as usize).rev() {
            let mut improved = true;
            while improved {
                improved = false;
                for n in self.links.list(cur.slot, level) {
                    let d = self.approx(q, n);
                    if n != skip && d < cur.dist {
                        cur = Near { dist: d, slot: n };
                        improved = true;
                    }
                }
            }
        }
        let mut visited = self.checkout_visited();
        visited.start(self.slots());
        visited.first_visit(skip);
        let found = self.walk_layer(q, &[cur], ef.max(k), 0, &mut visited, |s| {
            !self.deleted[s as usize] && !self.queued[s as usize]
        });
        self.return_visited(visited);
        self.rerank(q, k, &found)
    }
}

/// The mean of `recalls` less [`MARGIN`] standard errors of it (0 for no value).
fn lower_bound(recalls: &[f64]) -> f64 {
    let n = recalls.len();
    if n == 0 {
        return 0.0;
    }
    let mean = recalls.iter().sum::<f64>() / n as f64;
    let variance = recalls.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1).max(1) as f64;
    mean - MARGIN * (variance / n as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_grows_with_the_spread_of_the_probes_and_shrinks_with_their_number() {
        assert_eq!(lower_bound(&[]), 0.0);
        assert_eq!(lower_bound(&[0.9; 10]), 0.9);
        let mixed = [1.0, 0.8].repeat(8);
        let more = [1.0, 0.8].repeat(32);
        assert!(lower_bound(&mixed) < lower_bound(&more));
        assert!(lower_bound(&more) < 0.9);
        // 16 values of sd 0.103: the mean 0.9 less two standard errors of 0.026.
        assert!((lower_bound(&mixed) - (0.9 - MARGIN * 0.1033 / 4.0)).abs() < 1e-3);
    }
}
