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
//! beam. So the held-out probes only stand in until real queries are known: the first
//! [`PROBES`] distinct queries a default search serves are kept, and once there are that many
//! the breadth is measured again on them (their true neighbours found as for a probe; at most
//! [`SERVED_WIDENING`] times the held-out breadth), and on them again whenever the graph's
//! size calls for a new measure.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, MutexGuard};

use crate::vector::graph::{Graph, Near, Query, NONE};

/// The hits a search returns unless asked for another number: a save measures the default
/// breadth for it, so the file holds it.
pub const DEFAULT_K: usize = 10;
/// The recall@k promised to a default search, reached by the probes' recall less the margin.
pub const TARGET_RECALL: f64 = 0.95;
/// Standard errors of the probes' mean recall kept between it and [`TARGET_RECALL`], so that
/// the chosen breadth does not reach the target only by the luck of the probes drawn.
pub const MARGIN: f64 = 2.0;
/// Vectors searched for to measure the breadth (held-out probes: at most a quarter of the
/// linked ones), and the served queries kept to measure it on: at recall 0.95 the standard
/// error of their mean is about 0.005, so the margin costs about one rung.
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
/// How far the queries served may widen the breadth held-out vectors called for: queries that
/// need more are far off the data (random directions call for the widest beam, and gain
/// little by it); a search given its breadth can go wider.
const SERVED_WIDENING: usize = 2;
/// Above this many vector components (linked slots x dimension) the probes' true neighbours
/// come from a search of breadth `TRUTH_EF` instead of a scan of every vector.
const EXACT_TRUTH_MAX: usize = 1 << 23;
const TRUTH_EF: usize = 1024;
/// A measure holds while the linked graph stays within this factor of the size it had.
const REMEASURE_FACTOR: f64 = 1.5;

/// What was measured, per `k`, and whether on served queries.
#[derive(Debug, Clone, Copy)]
struct Measured {
    k: usize,
    linked: usize,
    ef: usize,
    served: bool,
}

/// The measured breadths of one graph, how many times they changed (so a save knows whether
/// its file holds the latest), and the served queries kept as probes.
#[derive(Default)]
pub(crate) struct Breadths(Mutex<State>);

#[derive(Default)]
struct State {
    measured: Vec<Measured>,
    changes: u64,
    served: Vec<Vec<f32>>,
    /// Hashes of the queries in `served`, so a repeated query is kept once.
    seen: HashSet<u64>,
}

impl State {
    /// Keeps `query` while fewer than [`PROBES`] distinct ones are kept.
    fn keep(&mut self, query: &[f32]) {
        if self.served.len() >= PROBES {
            return;
        }
        let mut h = DefaultHasher::new();
        query.iter().for_each(|x| x.to_bits().hash(&mut h));
        if self.seen.insert(h.finish()) {
            self.served.push(query.to_vec());
        }
    }

    fn served_ready(&self) -> bool {
        self.served.len() >= PROBES
    }
}

/// One measured breadth as the index file keeps it: `k`, the linked slots it was measured
/// on, the breadth, and 1 if it was measured on served queries (else 0).
pub(crate) type Saved = [u64; 4];

impl Graph {
    /// The breadth a default search of `k` hits uses: measured (see the module doc) on first
    /// use, once enough served queries are kept, and once the linked graph changed size by
    /// half; `fallback` while the graph is too small to probe. `query`, the prepared query of
    /// the search asking (if one does), may be kept as a probe.
    pub(crate) fn default_ef(&self, k: usize, fallback: usize, query: Option<&[f32]>) -> usize {
        let linked = self.slots() - self.pending.len();
        let fits = |m: &Measured| {
            m.k == k
                && (linked as f64) <= m.linked as f64 * REMEASURE_FACTOR
                && (linked as f64) * REMEASURE_FACTOR >= m.linked as f64
        };
        let (held_out, served) = {
            let mut state = self.lock_breadths();
            if let Some(q) = query {
                state.keep(q);
            }
            let ready = state.served_ready();
            if let Some(m) = state
                .measured
                .iter()
                .find(|m| fits(m) && (m.served || !ready))
            {
                return m.ef;
            }
            let held_out = state.measured.iter().find(|m| fits(m)).map(|m| m.ef);
            (held_out, ready.then(|| state.served.clone()))
        };
        let Some(held_out) = held_out.or_else(|| self.measure_ef(k, None, WIDEST)) else {
            return fallback.max(k);
        };
        let ef = match &served {
            Some(queries) => self
                .measure_ef(k, Some(queries), held_out * SERVED_WIDENING)
                .unwrap_or(held_out),
            None => held_out,
        };
        let state = &mut *self.lock_breadths();
        state.measured.retain(|m| m.k != k);
        state.measured.push(Measured {
            k,
            linked,
            ef,
            served: served.is_some(),
        });
        state.changes += 1;
        ef
    }

    /// The breadths measured so far, and a count that grows with each new measure.
    pub(crate) fn measured_breadths(&self) -> (Vec<Saved>, u64) {
        let state = self.lock_breadths();
        let list = state
            .measured
            .iter()
            .map(|m| [m.k as u64, m.linked as u64, m.ef as u64, m.served as u64])
            .collect();
        (list, state.changes)
    }

    /// Takes breadths measured before (read back from an index file).
    pub(crate) fn restore_breadths(&self, saved: &[Saved]) {
        self.lock_breadths().measured = saved
            .iter()
            .map(|&[k, linked, ef, served]| Measured {
                k: k as usize,
                linked: linked as usize,
                ef: ef as usize,
                served: served != 0,
            })
            .collect();
    }

    /// Bytes held by the served queries kept as probes.
    pub(crate) fn probe_bytes(&self) -> usize {
        let state = self.lock_breadths();
        let queries: usize = state.served.iter().map(|q| q.capacity() * 4).sum();
        queries + state.served.capacity() * 24 + state.seen.capacity() * 8
    }

    fn lock_breadths(&self) -> MutexGuard<'_, State> {
        self.breadths
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The narrowest breadth of the ladder up to `widest` reaching [`TARGET_RECALL`] over the
    /// probes (the `served` queries, or else stored vectors held out), `widest` if none does,
    /// or `None` when there are too few linked slots to probe.
    fn measure_ef(&self, k: usize, served: Option<&[Vec<f32>]>, widest: usize) -> Option<usize> {
        let entry = self.entry();
        let usable = |s: u32| !self.deleted[s as usize] && !self.queued[s as usize];
        let linked: Vec<u32> = (0..self.slots() as u32).filter(|&s| usable(s)).collect();
        let count = PROBES.min(linked.len() / 4);
        if entry == NONE || count < MIN_PROBES || linked.len() <= 2 * k {
            return None;
        }
        // Each probe with the slot the walk must not step on (its own, if it is stored).
        let (probes, vectors): (Vec<u32>, Cow<[Vec<f32>]>) = match served {
            Some(queries) => (vec![NONE; queries.len()], Cow::Borrowed(queries)),
            None => {
                let step = linked.len() / count;
                let held_out: Vec<u32> = (0..count)
                    .map(|i| linked[i * step + step / 2])
                    .filter(|&p| p != entry)
                    .collect();
                // A probe whose vector cannot be read leaves the breadth unmeasured (the
                // default stays).
                let vectors = held_out
                    .iter()
                    .map(|&p| self.vector(p))
                    .collect::<crate::error::Result<_>>()
                    .ok()?;
                (held_out, Cow::Owned(vectors))
            }
        };
        let exact_truth = linked.len() * self.params.dim <= EXACT_TRUTH_MAX;
        let truths: Vec<Vec<u32>> = probes
            .iter()
            .zip(vectors.iter())
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
                    self.rerank(&q, k, &coarse, 1.0)
                } else {
                    self.search_without(&q, p, k, TRUTH_EF.max(k), 1.0)
                };
                found.into_iter().map(|n| n.slot).collect()
            })
            .collect();
        // The probes' mean recall at a breadth, less `MARGIN` standard errors of it.
        let assured_recall = |ef: usize| {
            let recalls: Vec<f64> = probes
                .iter()
                .zip(vectors.iter())
                .zip(&truths)
                .filter(|(_, truth)| !truth.is_empty())
                .map(|((&p, v), truth)| {
                    let got = self.search_without(&Query::new(v), p, k, ef, self.likely_share());
                    let hits = truth.iter().filter(|t| got.iter().any(|n| n.slot == **t));
                    hits.count() as f64 / truth.len() as f64
                })
                .collect();
            lower_bound(&recalls)
        };
        // Recall grows with the breadth: binary search for the first rung that reaches it.
        let widest = widest.max(k);
        let rungs: Vec<usize> = LADDER
            .iter()
            .map(|&e| e.max(k))
            .filter(|&e| e <= widest)
            .collect();
        let (mut lo, mut hi) = (0, rungs.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if assured_recall(rungs[mid]) >= TARGET_RECALL {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(rungs.get(lo).copied().unwrap_or(widest))
    }

    /// The `k` nearest live linked slots to `q` other than `skip` (if not `NONE`), found by a
    /// walk that never steps on `skip` (as if it were not stored), with exact distances; the
    /// re-rank allows for `share` of the codes' error bound (see [`Graph::rerank`]).
    fn search_without(&self, q: &Query, skip: u32, k: usize, ef: usize, share: f32) -> Vec<Near> {
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
        if skip != NONE {
            visited.first_visit(skip);
        }
        let found = self.walk_layer(q, &[cur], ef.max(k), 0, &mut visited, |s| {
            !self.deleted[s as usize] && !self.queued[s as usize]
        });
        self.return_visited(visited);
        self.rerank(q, k, &found, share)
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
    use crate::distance::Metric;
    use crate::vector::graph::tests::{build, clustered, exact, prepared};

    /// 4,000 cosine vectors of 48 dimensions around `clusters` centres (seeded), their graph,
    /// and its default breadth as measured on held-out vectors.
    fn measured_graph(seed: u64, clusters: usize) -> (Vec<Vec<f32>>, Graph, usize) {
        let data: Vec<Vec<f32>> = clustered(seed, 4000, 48, clusters)
            .iter()
            .map(|v| prepared(Metric::Cosine, v))
            .collect();
        let g = build(Metric::Cosine, &data);
        let held_out = g.default_ef(DEFAULT_K, 64, None);
        (data, g, held_out)
    }

    /// `n` queries off the data: stored vectors each moved by noise about as long as itself.
    fn off_data(data: &[Vec<f32>], seed: u64, n: usize) -> Vec<Vec<f32>> {
        let dim = data[0].len();
        let noise = clustered(seed, n, dim, n);
        (0..n)
            .map(|i| {
                let v = &data[(i * 7919) % data.len()];
                let scale = (v.iter().map(|x| x * x).sum::<f32>()
                    / noise[i].iter().map(|x| x * x).sum::<f32>())
                .sqrt();
                let q: Vec<f32> = v
                    .iter()
                    .zip(&noise[i])
                    .map(|(a, b)| a + scale * b)
                    .collect();
                prepared(Metric::Cosine, &q)
            })
            .collect()
    }

    fn recall(g: &Graph, queries: &[Vec<f32>], ef: usize) -> f64 {
        let hits: usize = queries
            .iter()
            .map(|q| {
                let truth = exact(g, q, DEFAULT_K);
                let got = g.search(q, DEFAULT_K, ef, |_| true);
                truth
                    .iter()
                    .filter(|t| got.iter().any(|n| n.slot == **t))
                    .count()
            })
            .sum();
        hits as f64 / (queries.len() * DEFAULT_K) as f64
    }

    #[test]
    fn the_default_breadth_is_measured_again_on_the_queries_served() {
        // seed 21 for the data (uniform: a centre per vector), 22 and 23 for two sets of
        // queries off it, which are easier to answer than held-out vectors here.
        let (data, g, held_out) = measured_graph(21, 4000);
        let served = off_data(&data, 22, PROBES);
        // Until as many distinct queries as there are probes are kept, the measure stands;
        // a repeated query is kept once.
        let almost = &served[..PROBES - 1];
        for q in almost.iter().chain(almost) {
            let ef = g.default_ef(DEFAULT_K, 64, Some(q));
            assert_eq!(
                ef, held_out,
                "measured again before the queries were all kept"
            );
        }
        let before = g.measured_breadths();
        assert_eq!(before.0, vec![[DEFAULT_K as u64, 4000, held_out as u64, 0]]);
        // The last distinct query makes the measure on the served queries.
        let ef = g.default_ef(DEFAULT_K, 64, Some(&served[PROBES - 1]));
        let after = g.measured_breadths();
        assert_eq!(after.0, vec![[DEFAULT_K as u64, 4000, ef as u64, 1]]);
        assert_eq!(after.1, before.1 + 1);
        // New queries like the served ones reach the target at the new, narrower breadth; the
        // measure now stays.
        let fresh = off_data(&data, 23, 150);
        let (at_default, at_held_out) = (recall(&g, &fresh, ef), recall(&g, &fresh, held_out));
        assert!(
            at_default >= TARGET_RECALL,
            "{held_out} {at_held_out} -> {ef} {at_default}"
        );
        assert!(
            ef < held_out,
            "{held_out} {at_held_out} -> {ef} {at_default}"
        );
        assert_eq!(g.default_ef(DEFAULT_K, 64, Some(&fresh[0])), ef);
        assert_eq!(g.measured_breadths().1, after.1);
    }

    #[test]
    fn queries_far_off_the_data_widen_the_breadth_only_so_far() {
        // seed 25 for the data (40 clusters), 26 for queries in uniformly random directions.
        let (_, g, held_out) = measured_graph(25, 40);
        let random: Vec<Vec<f32>> = clustered(26, PROBES, 48, PROBES)
            .iter()
            .map(|v| {
                prepared(
                    Metric::Cosine,
                    &v.iter().map(|x| x - 0.35).collect::<Vec<_>>(),
                )
            })
            .collect();
        let unbounded = g.measure_ef(DEFAULT_K, Some(&random), WIDEST).unwrap();
        for q in &random {
            g.default_ef(DEFAULT_K, 64, Some(q));
        }
        let ef = g.default_ef(DEFAULT_K, 64, None);
        assert!(
            unbounded > SERVED_WIDENING * held_out,
            "{held_out} {unbounded}"
        );
        assert!(
            ef <= SERVED_WIDENING * held_out && ef > held_out,
            "{held_out} {ef}"
        );
        assert_eq!(
            g.measured_breadths().0[0][3],
            1,
            "measured on the queries served"
        );
    }

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
