//! Search execution: the exact scan of the allowed vectors and the gated graph walk, as the
//! planner chose from the counts worked out here (slot lists, or a sample of records for a
//! filter they cannot bound).

use std::collections::BinaryHeap;

use crate::filter::Filter;
use crate::vector::graph::{Near, Query};
use crate::vector::plan::{measured_base, plan, Counts, Plan, EF_DEFAULT};
use crate::vector::postings::Candidates;
use crate::vector::VectorIndex;

/// Records read to estimate how many vectors a filter the slot lists cannot bound allows.
pub const SAMPLE_SIZE: usize = 1024;

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

/// The plan for one query, with the candidate slots the slot lists give (if any).
pub fn plan_for(
    index: &VectorIndex,
    k: usize,
    filter: Option<&Filter>,
    ef: Option<usize>,
) -> (Plan, Option<Candidates>) {
    let (counts, candidates) = counts(index, filter);
    (plan(counts, k, ef), candidates)
}

/// What the planner reads, with the candidate slots the slot lists give (if any).
fn counts(index: &VectorIndex, filter: Option<&Filter>) -> (Counts, Option<Candidates>) {
    let candidates = candidates(index, filter);
    let allowed = filter.map(|f| match &candidates {
        Some(c) if c.exact => c.count(index.len()),
        // A bound: the records inside it are sampled.
        Some(c) if !c.complement => estimate(index, f, &c.slots),
        _ => estimate_all(index, f),
    });
    let counts = Counts {
        live: index.len(),
        allowed,
        posted: candidates.is_some(),
    };
    (counts, candidates)
}

/// A bound of no more than [`SAMPLE_SIZE`] slots checked against `filter` record by record,
/// which is what its estimate would read: the slots that pass, exactly. Any other set as given.
fn settled(
    index: &VectorIndex,
    filter: &Filter,
    candidates: Option<Candidates>,
) -> Option<Candidates> {
    match candidates {
        Some(Candidates {
            mut slots,
            exact: false,
            complement: false,
        }) if slots.len() <= SAMPLE_SIZE => {
            let g = &index.graph;
            slots.retain(|&s| !g.is_deleted(s) && filter.matches(&index.records.get(s)));
            Some(Candidates {
                slots,
                exact: true,
                complement: false,
            })
        }
        other => other,
    }
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
    let (counts, candidates) = counts(index, filter);
    let mut chosen = plan(counts, k, ef);
    if let (Plan::Graph { .. }, None) = (&chosen, ef) {
        // No breadth given: start from the one measured on this graph.
        let measured = index.graph.default_ef(k, EF_DEFAULT, Some(query));
        chosen = plan(counts, k, Some(measured_base(measured, counts)));
    }
    match chosen {
        Plan::ExactPosted | Plan::ExactAll => (
            exact(index, query, k, allowed_from(index, filter, candidates)),
            false,
        ),
        Plan::Graph { ef } => {
            let found = graph_search(index, query, k, ef, filter, candidates.as_ref());
            // The graph may come back short when few vectors pass; the exact scan cannot.
            if found.len() < k && found.len() < index.len() {
                (
                    exact(index, query, k, allowed_from(index, filter, candidates)),
                    true,
                )
            } else {
                (found, false)
            }
        }
    }
}

/// The gated graph walk, plus an exact scan of the allowed slots not yet linked.
pub fn graph_search(
    index: &VectorIndex,
    query: &[f32],
    k: usize,
    ef: usize,
    filter: Option<&Filter>,
    candidates: Option<&Candidates>,
) -> Vec<Near> {
    let gate = Gate::new(index, filter, candidates);
    let allows = |s: u32| gate.allows(index, s);
    let mut found = index.graph.search(query, k, ef, allows);
    // Slots not yet linked are out of the graph's reach: scan them exactly.
    let unlinked: Vec<u32> = index.graph.pending().filter(|&s| allows(s)).collect();
    if !unlinked.is_empty() {
        found.extend(exact(index, query, k, unlinked));
        found.sort_unstable();
        found.truncate(k);
    }
    found
}

/// How many live vectors `filter` allows among `slots`, estimated from an even sample of them.
fn estimate(index: &VectorIndex, filter: &Filter, slots: &[u32]) -> usize {
    let step = (slots.len() / SAMPLE_SIZE).max(1);
    let (mut seen, mut passed) = (0usize, 0usize);
    for &slot in slots.iter().step_by(step) {
        if index.graph.is_deleted(slot) {
            continue;
        }
        seen += 1;
        passed += filter.matches(&index.records.get(slot)) as usize;
    }
    if seen == 0 {
        return 0;
    }
    passed * slots.len() / seen
}

/// How many live vectors `filter` allows, estimated from an evenly spaced sample of all slots.
fn estimate_all(index: &VectorIndex, filter: &Filter) -> usize {
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

/// What a graph search may collect (deleted slots aside). Slots the lists give become a
/// bitmap: one bit test per visited slot.
enum Gate<'f> {
    All,
    Bits(SlotBits),
    BitsAnd(SlotBits, &'f Filter),
    Filter(&'f Filter),
}

impl<'f> Gate<'f> {
    fn new(
        index: &VectorIndex,
        filter: Option<&'f Filter>,
        candidates: Option<&Candidates>,
    ) -> Gate<'f> {
        let Some(f) = filter else {
            return Gate::All;
        };
        match candidates {
            Some(c) => {
                let bits = SlotBits::from_slots(&c.slots, index.graph.slots(), c.complement);
                if c.exact {
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

/// Every live slot `filter` allows, ascending, read from the slot lists where they bound it.
pub fn allowed_slots(index: &VectorIndex, filter: Option<&Filter>) -> Vec<u32> {
    allowed_from(index, filter, candidates(index, filter))
}

/// The slots the slot lists give for `filter`, settled (see [`settled`]).
fn candidates(index: &VectorIndex, filter: Option<&Filter>) -> Option<Candidates> {
    filter.and_then(|f| settled(index, f, index.postings.candidates(f, index.len())))
}

fn allowed_from(
    index: &VectorIndex,
    filter: Option<&Filter>,
    candidates: Option<Candidates>,
) -> Vec<u32> {
    let g = &index.graph;
    let passes =
        |s: u32| !g.is_deleted(s) && filter.is_none_or(|f| f.matches(&index.records.get(s)));
    match candidates {
        // The lists are exactly what the filter allows: no record need be read.
        Some(Candidates {
            mut slots,
            exact: true,
            complement: false,
        }) => {
            slots.retain(|&s| !g.is_deleted(s));
            slots
        }
        Some(Candidates {
            mut slots,
            exact: false,
            complement: false,
        }) => {
            slots.retain(|&s| passes(s));
            slots
        }
        Some(Candidates {
            slots,
            exact,
            complement: true,
        }) => {
            let outside = SlotBits::from_slots(&slots, g.slots(), true);
            (0..g.slots() as u32)
                .filter(|&s| outside.has(s) && if exact { !g.is_deleted(s) } else { passes(s) })
                .collect()
        }
        None => (0..g.slots() as u32).filter(|&s| passes(s)).collect(),
    }
}

/// The exact `k` closest of `slots` (query already prepared), closest first. One pass over
/// the codes keeps the `k` best upper bounds of the distances and, as a shortlist, every slot
/// whose lower bound does not exceed the `k`-th of them; then
/// [`Graph::measure`](crate::vector::graph::Graph::measure) measures the few that can matter
/// with their float vectors.
pub fn exact(index: &VectorIndex, query: &[f32], k: usize, slots: Vec<u32>) -> Vec<Near> {
    if k == 0 || slots.is_empty() {
        return Vec::new();
    }
    let g = &index.graph;
    let q = Query::new(query);
    let mut uppers: BinaryHeap<Upper> = BinaryHeap::with_capacity(k + 1);
    let mut shortlist: Vec<Near> = Vec::new();
    for (i, &slot) in slots.iter().enumerate() {
        // The slots are scattered: start loading a few ahead of the one measured.
        if let Some(&ahead) = slots.get(i + PREFETCH_AHEAD) {
            g.prefetch_codes(ahead);
            g.prefetch_bound(ahead);
        }
        let (dist, bound) = (g.approx(&q, slot), g.bound(&q, slot));
        let upper = Upper(dist + bound);
        if uppers.len() < k {
            uppers.push(upper);
        } else if uppers.peek().is_some_and(|w| upper < *w) {
            uppers.pop();
            uppers.push(upper);
        }
        let lower = dist - bound;
        if uppers.len() < k || uppers.peek().is_some_and(|w| lower <= w.0) {
            shortlist.push(Near { dist: lower, slot });
        }
    }
    // The cut only fell while the pass went on: drop what an early, looser one let in.
    let cut = uppers.peek().map_or(f32::INFINITY, |w| w.0);
    shortlist.retain(|lower| lower.dist <= cut);
    g.measure(&q, k, shortlist)
}

/// An upper bound of a distance, ordered totally (NaN last), for the heap of the `k` best.
#[derive(Clone, Copy, PartialEq)]
struct Upper(f32);

impl Eq for Upper {}
impl Ord for Upper {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}
impl PartialOrd for Upper {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// How many slots ahead the exact scan prefetches.
const PREFETCH_AHEAD: usize = 6;

/// One bit per slot: set for the slots given, or (`outside`) for every other slot.
struct SlotBits(Vec<u64>);

impl SlotBits {
    fn from_slots(slots: &[u32], len: usize, outside: bool) -> SlotBits {
        let fill = if outside { u64::MAX } else { 0 };
        let mut words = vec![fill; len.div_ceil(64)];
        for &s in slots {
            let (word, bit) = (&mut words[s as usize / 64], 1 << (s % 64));
            *word = if outside { *word & !bit } else { *word | bit };
        }
        SlotBits(words)
    }

    #[inline]
    fn has(&self, slot: u32) -> bool {
        self.0[slot as usize / 64] & (1 << (slot % 64)) != 0
    }
}

#[cfg(test)]
mod tests;
