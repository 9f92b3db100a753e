//! Rankings smoothed over the timeline (a message's score lifted by its neighbours') and
//! fused (lexical and vector rankings by weighted reciprocal rank).

use std::collections::HashSet;

use rustc_hash::{FxHashMap, FxHashSet};

use super::Timeline;

impl Timeline {
    /// Each scored message's score plus `weight` times the best score of its direct
    /// neighbours (unscored ones count 0), and the same for the unscored neighbours of scored
    /// messages (those in `entrants`, when given), which start from 0. Scored messages come
    /// first in their order, then the neighbours in the order they were met.
    pub fn smooth<'a>(
        &'a self,
        scores: &[(&'a str, f64)],
        resource_id: Option<&str>,
        weight: f64,
        entrants: Option<&HashSet<&str>>,
    ) -> Vec<(&'a str, f64)> {
        let mut numbers = Numbers::new(self, resource_id, entrants);
        let scores = numbers.of(scores);
        let smoothed = smooth_with(&scores, weight, &mut numbers);
        numbers.named(smoothed)
    }

    /// Hybrid ranking, best first: each of the `lexical` and `vector` rankings (best first)
    /// smoothed by `side_weight` and re-ranked; the two fused by weighted reciprocal rank,
    /// `lexical_weight / (rrf_k + rank)` plus `1 / (rrf_k + rank)`, in the order ids were met;
    /// that smoothed by `final_weight`. Ties keep their order. Each message's neighbours are
    /// looked up once for all three smoothings.
    pub fn fuse<'a>(
        &'a self,
        lexical: &[(&'a str, f64)],
        vector: &[(&'a str, f64)],
        resource_id: Option<&str>,
        entrants: Option<&HashSet<&str>>,
        fusion: &Fusion,
    ) -> Vec<(&'a str, f64)> {
        let mut numbers = Numbers::new(self, resource_id, entrants);
        let sides = [numbers.of(lexical), numbers.of(vector)];
        let mut fused: Vec<(u32, f64)> = Vec::new();
        let mut at: FxHashMap<u32, usize> = FxHashMap::default();
        for (side, weight) in sides.iter().zip([fusion.lexical_weight, 1.0]) {
            let ranking = best_first(smooth_with(side, fusion.side_weight, &mut numbers));
            for (rank, &(n, _)) in ranking.iter().enumerate() {
                let share = weight / (fusion.rrf_k + (rank + 1) as f64);
                match at.get(&n) {
                    Some(&i) => fused[i].1 += share,
                    None => {
                        at.insert(n, fused.len());
                        fused.push((n, share));
                    }
                }
            }
        }
        let ranked = best_first(smooth_with(&fused, fusion.final_weight, &mut numbers));
        numbers.named(ranked)
    }
}

/// The weights of [`Timeline::fuse`].
#[derive(Debug, Clone, Copy)]
pub struct Fusion {
    pub side_weight: f64,
    pub lexical_weight: f64,
    pub rrf_k: f64,
    pub final_weight: f64,
}

/// The messages of one smoothing or fusion call, numbered: a message's slot, or for an id
/// the timeline lacks a number past every slot. Each number's neighbours are looked up once.
struct Numbers<'a> {
    timeline: &'a Timeline,
    scope: Option<Option<u32>>,
    entrants: Option<FxHashSet<u32>>,
    strangers: Vec<&'a str>,
    known: FxHashMap<&'a str, u32>,
    sides: FxHashMap<u32, [Option<u32>; 4]>,
}

impl<'a> Numbers<'a> {
    fn new(
        timeline: &'a Timeline,
        resource_id: Option<&str>,
        entrants: Option<&HashSet<&str>>,
    ) -> Self {
        // Only messages of the timeline can be met as neighbours, so only they need numbers.
        let entrants =
            entrants.map(|ids| ids.iter().filter_map(|id| timeline.slot_of(id)).collect());
        Numbers {
            timeline,
            scope: timeline.scope(resource_id),
            entrants,
            strangers: Vec::new(),
            known: FxHashMap::default(),
            sides: FxHashMap::default(),
        }
    }

    fn number(&mut self, id: &'a str) -> u32 {
        if let Some(&n) = self.known.get(id) {
            return n;
        }
        let n = self.timeline.slot_of(id).unwrap_or_else(|| {
            self.strangers.push(id);
            (self.timeline.slots.len() + self.strangers.len() - 1) as u32
        });
        self.known.insert(id, n);
        n
    }

    fn of(&mut self, scores: &[(&'a str, f64)]) -> Vec<(u32, f64)> {
        scores.iter().map(|&(id, s)| (self.number(id), s)).collect()
    }

    fn named(&self, numbered: Vec<(u32, f64)>) -> Vec<(&'a str, f64)> {
        let slots = self.timeline.slots.len();
        numbered
            .into_iter()
            .map(|(n, s)| match (n as usize).checked_sub(slots) {
                Some(i) => (self.strangers[i], s),
                None => (&*self.timeline.slot(n).id, s),
            })
            .collect()
    }

    /// The two messages each side of `n` in its thread within the scope:
    /// `[farther before, before, after, farther after]`.
    fn sides(&mut self, n: u32) -> [Option<u32>; 4] {
        let (timeline, scope) = (self.timeline, self.scope);
        *self.sides.entry(n).or_insert_with(|| {
            let found = (n as usize) < timeline.slots.len();
            match scope.filter(|_| found).and_then(|r| timeline.around(n, r)) {
                Some((_, mut earlier, mut later)) => {
                    let (before, after) = (earlier.next(), later.next());
                    let (far_before, far_after) = (earlier.next(), later.next());
                    [far_before, before, after, far_after].map(|k| k.map(|k| k.2))
                }
                None => [None; 4],
            }
        })
    }

    fn may_enter(&self, n: u32) -> bool {
        self.entrants.as_ref().is_none_or(|e| e.contains(&n))
    }
}

/// [`Timeline::smooth`] over numbered messages. A scored message's nearer two `sides` are its
/// neighbours, and a farther one is the other neighbour of a nearer one met as a newcomer, so
/// newcomers need no lookup of their own.
fn smooth_with(scores: &[(u32, f64)], weight: f64, numbers: &mut Numbers<'_>) -> Vec<(u32, f64)> {
    let scored: FxHashMap<u32, f64> = scores.iter().copied().collect();
    let score = |n: u32| scored.get(&n).copied().unwrap_or(0.0);
    let best = |a: Option<u32>, b: Option<u32>| {
        [a, b]
            .into_iter()
            .flatten()
            .map(score)
            .reduce(f64::max)
            .unwrap_or(0.0)
    };
    let sides: Vec<[Option<u32>; 4]> = scores.iter().map(|&(n, _)| numbers.sides(n)).collect();
    let mut out: Vec<(u32, f64)> = scores
        .iter()
        .zip(&sides)
        .map(|(&(n, _), [_, before, after, _])| (n, score(n) + weight * best(*before, *after)))
        .collect();
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    for (&(n, _), [far_before, before, after, far_after]) in scores.iter().zip(&sides) {
        for (newcomer, far) in [(before, far_before), (after, far_after)] {
            let Some(newcomer) = *newcomer else { continue };
            if !scored.contains_key(&newcomer)
                && numbers.may_enter(newcomer)
                && seen.insert(newcomer)
            {
                out.push((newcomer, weight * best(Some(n), *far)));
            }
        }
    }
    out
}

/// Best score first; equal scores keep their order.
pub fn best_first<T>(mut scored: Vec<(T, f64)>) -> Vec<(T, f64)> {
    scored.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
    scored
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::tests::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn smooth_adds_the_best_neighbour_and_scores_unscored_neighbours() {
        let t = ten();
        let got = t.smooth(&[("m5", 1.0), ("m6", 3.0), ("m0", -1.0)], None, 0.5, None);
        assert_eq!(
            got,
            [
                ("m5", 1.0 + 0.5 * 3.0),
                ("m6", 3.0 + 0.5 * 1.0),
                ("m0", -1.0 + 0.5 * 0.0),
                ("m4", 0.5 * 1.0),
                ("m7", 0.5 * 3.0),
                ("m1", 0.5 * 0.0) // its other neighbour, m2, is unscored: 0 beats -1
            ]
        );
        let only: HashSet<&str> = ["m7"].into();
        let got = t.smooth(&[("m6", 2.0)], None, 0.5, Some(&only));
        assert_eq!(got, [("m6", 2.0), ("m7", 1.0)]);
    }

    /// `Timeline::smooth` by its definition: each id's neighbours looked up on their own.
    fn smooth_by_definition<'a>(
        t: &'a Timeline,
        scores: &[(&'a str, f64)],
        resource_id: Option<&str>,
        weight: f64,
        entrants: Option<&HashSet<&str>>,
    ) -> Vec<(&'a str, f64)> {
        let scored: HashMap<&str, f64> = scores.iter().copied().collect();
        let ids: Vec<&str> = scores.iter().map(|(id, _)| *id).collect();
        let mut pairs = t.adjacent(&ids, resource_id);
        let mut seen = HashSet::new();
        let newcomers: Vec<&str> = pairs
            .iter()
            .flat_map(|(a, b)| [*a, *b])
            .flatten()
            .filter(|n| !scored.contains_key(n) && entrants.is_none_or(|e| e.contains(n)))
            .filter(|n| seen.insert(*n))
            .collect();
        pairs.extend(t.adjacent(&newcomers, resource_id));
        let score = |id: &str| scored.get(id).copied().unwrap_or(0.0);
        ids.into_iter()
            .chain(newcomers)
            .zip(pairs)
            .map(|(id, (a, b))| {
                let best = [a, b].into_iter().flatten().map(score).reduce(f64::max);
                (id, score(id) + weight * best.unwrap_or(0.0))
            })
            .collect()
    }

    /// `Timeline::fuse` as its parts: two smoothings, reciprocal rank fusion, one smoothing.
    fn fuse_by_parts<'a>(
        t: &'a Timeline,
        sides: [&[(&'a str, f64)]; 2],
        resource_id: Option<&str>,
        entrants: Option<&HashSet<&str>>,
        f: &Fusion,
    ) -> Vec<(&'a str, f64)> {
        let mut fused: Vec<(&str, f64)> = Vec::new();
        for (side, weight) in sides.iter().zip([f.lexical_weight, 1.0]) {
            let ranking = best_first(t.smooth(side, resource_id, f.side_weight, entrants));
            for (rank, (id, _)) in ranking.iter().enumerate() {
                let share = weight / (f.rrf_k + (rank + 1) as f64);
                match fused.iter_mut().find(|(seen, _)| seen == id) {
                    Some(entry) => entry.1 += share,
                    None => fused.push((id, share)),
                }
            }
        }
        best_first(t.smooth(&fused, resource_id, f.final_weight, entrants))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1500, rng_seed: proptest::test_runner::RngSeed::Fixed(0xc0de), ..ProptestConfig::default() })]

        #[test]
        fn smooth_equals_its_definition(
            specs in arb_rows(),
            picks in prop::collection::vec((0usize..44, -2i32..5), 0..12),
            resource in prop::option::of(0u8..3),
            only in prop::option::of(prop::collection::vec(0usize..44, 0..10)),
        ) {
            let t = build(&specs);
            let names: Vec<String> = (0..44).map(|i| format!("m{i}")).collect(); // some unknown
            let scores: Vec<(&str, f64)> = picks.iter().map(|&(i, s)| (names[i].as_str(), s as f64)).collect();
            let resource_name = resource.map(|r| format!("r{r}")); // r2 is unknown
            let entrants: Option<HashSet<&str>> = only.map(|o| o.iter().map(|&i| names[i].as_str()).collect());
            prop_assert_eq!(
                t.smooth(&scores, resource_name.as_deref(), 0.5, entrants.as_ref()),
                smooth_by_definition(&t, &scores, resource_name.as_deref(), 0.5, entrants.as_ref())
            );
        }

        #[test]
        fn fuse_equals_its_parts(
            specs in arb_rows(),
            lexical in prop::collection::btree_map(0usize..44, -2i32..5, 0..10),
            vector in prop::collection::btree_map(0usize..44, -2i32..5, 0..10),
            resource in prop::option::of(0u8..3),
            only in prop::option::of(prop::collection::vec(0usize..44, 0..10)),
        ) {
            let t = build(&specs);
            let names: Vec<String> = (0..44).map(|i| format!("m{i}")).collect();
            let side = |m: &std::collections::BTreeMap<usize, i32>| -> Vec<(&str, f64)> {
                m.iter().map(|(&i, &s)| (names[i].as_str(), s as f64)).collect()
            };
            let (lexical, vector) = (side(&lexical), side(&vector));
            let resource_name = resource.map(|r| format!("r{r}"));
            let entrants: Option<HashSet<&str>> = only.map(|o| o.iter().map(|&i| names[i].as_str()).collect());
            let f = Fusion { side_weight: 0.3, lexical_weight: 1.5, rrf_k: 5.0, final_weight: 0.5 };
            prop_assert_eq!(
                t.fuse(&lexical, &vector, resource_name.as_deref(), entrants.as_ref(), &f),
                fuse_by_parts(&t, [&lexical, &vector], resource_name.as_deref(), entrants.as_ref(), &f)
            );
        }
    }
}
