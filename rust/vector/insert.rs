//! Linking vectors into the graph: one at a time, or many at once on several threads.
//!
//! A slot may be stored before it is linked: [`Graph::push`] appends the vector and draws its
//! level, queueing the slot; [`Graph::link_pending`] links queued slots in arrival order, and
//! builds the same graph as inserting one vector at a time. Linking one slot is split in two so
//! that the costly part can run beside searches: [`Graph::plan_link`] (under a read lock)
//! works out every list to write, [`Graph::apply_link`] (under the write lock) writes them.
//!
//! A large backlog is linked on several threads at once instead ([`Graph::link_batch`], under
//! a read lock, beside searches): each thread takes the next queued slot, searches for its
//! neighbours in the graph as it is, and writes its own and its neighbours' lists under
//! per-slot locks, as hnswlib does. [`Graph::finish_batch`] (under the write lock) then takes
//! the batch off the queue; until then searches never collect its slots, and scan them exactly.
//!
//! Neighbour lists are pruned with the usual diversity heuristic, with one exception: a slot
//! held by fewer than [`MIN_HOLDERS`] other level-0 lists is not dropped while the list has
//! room. Without it, duplicates and near-duplicates (which all look redundant beside each
//! other) lose nearly every in-link and drop out of reach of ordinary searches.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::vector::graph::{Graph, Near, Query, NONE};

/// A new slot keeps at least `m / MIN_KEPT_DIVISOR` neighbours, however redundant.
const MIN_KEPT_DIVISOR: usize = 2;

/// A level-0 list with room keeps a slot that fewer than this many other lists hold. With one,
/// a near-duplicate among hundreds of equally near ones could be left with a single in-link
/// that a search of ordinary breadth passes by.
const MIN_HOLDERS: i64 = 4;

/// How to link one queued slot, worked out by [`Graph::plan_link`].
#[derive(Debug)]
pub struct LinkPlan {
    slot: u32,
    /// The graph's epoch when planned; the plan is valid only while it is unchanged.
    epoch: u64,
    /// `(slot, level, links)` to write, the linked slot's own lists included.
    lists: Vec<(u32, usize, Vec<u32>)>,
}

/// What [`Graph::apply_link`] did with a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linked {
    /// The slot is linked.
    Yes,
    /// The slot had been deleted: it left the queue unlinked.
    Dropped,
    /// The graph changed since the plan was made; nothing was written.
    Stale,
}

impl Graph {
    /// Prepares (for cosine: normalises) and appends a vector, linking it (and anything
    /// queued before it) into the graph. The caller has checked the length. Returns its slot.
    pub fn insert(&mut self, vector: &[f32]) -> u32 {
        let slot = self.push(vector);
        self.link_pending(usize::MAX);
        slot
    }

    /// Prepares and appends a vector and draws its level, queueing it to be linked later
    /// (see [`Graph::link_pending`]). The caller has checked the length. Returns its slot.
    pub fn push(&mut self, vector: &[f32]) -> u32 {
        let slot = self.slots() as u32;
        let mut prepared = vector.to_vec();
        self.params.metric.prepare(&mut prepared);
        self.originals.push(&prepared);
        let level = self.draw_level();
        self.codes.push(&prepared);
        self.levels.push(level as u8);
        self.links.push(level);
        self.deleted.push(false);
        self.queued.push(true);
        self.pending.push_back(slot);
        slot
    }

    /// Links up to `max_count` queued live slots into the graph, oldest first (deleted ones
    /// are dropped from the queue without counting). Returns how many were linked.
    pub fn link_pending(&mut self, max_count: usize) -> usize {
        let mut linked = 0;
        while linked < max_count {
            let Some(plan) = self.plan_link() else {
                break;
            };
            if self.apply_link(plan) == Linked::Yes {
                linked += 1;
            }
        }
        linked
    }

    /// The queued slots not yet linked nor deleted, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = u32> + '_ {
        self.pending
            .iter()
            .copied()
            .filter(|&s| !self.deleted[s as usize])
    }

    /// Works out, without changing anything, how to link the oldest queued live slot: the
    /// neighbour searches at every level and the pruned lists of the neighbours that link
    /// back. This is nearly all the cost of linking, so it can run beside searches (under a
    /// read lock); [`Graph::apply_link`] then writes the lists. `None` when nothing is queued.
    pub fn plan_link(&self) -> Option<LinkPlan> {
        let slot = self.pending().next()?;
        let mut plan = LinkPlan {
            slot,
            epoch: self.epoch,
            lists: Vec::new(),
        };
        if self.entry() == NONE {
            return Some(plan);
        }
        // A level's search reads only that level's links, so writing the upper levels' lists
        // first (as one-at-a-time insertion does) would not change it.
        // In-degree changes of the lists planned so far, which the graph does not show yet.
        let mut held: HashMap<u32, i64> = HashMap::new();
        self.neighbourhoods(slot, |level, chosen| {
            for &n in &chosen {
                let indegree = |s: u32| self.links.indegree(s) as i64 + held.get(&s).unwrap_or(&0);
                if let Some(list) = self.with_back_link(n, slot, level, indegree) {
                    if level == 0 {
                        for old in self.links.list(n, 0) {
                            *held.entry(old).or_default() -= 1;
                        }
                        for &new in &list {
                            *held.entry(new).or_default() += 1;
                        }
                    }
                    plan.lists.push((n, level, list));
                }
            }
            plan.lists.push((slot, level, chosen));
        });
        Some(plan)
    }

    /// Searches the graph for `slot`'s neighbours, top level first, handing each level's
    /// chosen neighbours to `chosen`.
    fn neighbourhoods(&self, slot: u32, mut chosen: impl FnMut(usize, Vec<u32>)) {
        let entry = self.entry();
        let level = self.levels[slot as usize] as usize;
        let query = self.code_query(slot);
        let top = self.levels[entry as usize] as usize;
        let mut ep = self.greedy_descent(&query, entry, top, level);
        let mut visited = self.checkout_visited();
        for lc in (0..=level.min(top)).rev() {
            let found = self.search_layer(
                &query,
                &ep,
                self.params.ef_construction,
                lc,
                &mut visited,
                |s| s != slot,
            );
            let found = tie_shuffled(slot, found);
            let mut kept = self.select_neighbours(&found, self.params.m);
            // Around a hub (many near-duplicates of one point) the heuristic keeps only the
            // hub: top up with the nearest pruned candidates so the slot gets in-links.
            let least = self.params.m.div_ceil(MIN_KEPT_DIVISOR);
            for c in &found {
                if kept.len() >= least {
                    break;
                }
                if !kept.contains(&c.slot) {
                    kept.push(c.slot);
                }
            }
            chosen(lc, kept);
            ep = found;
        }
        self.return_visited(visited);
    }

    /// Writes a plan from [`Graph::plan_link`] if the graph's links and queue have not changed
    /// since it was made (else `Linked::Stale`: plan again). A slot deleted meanwhile leaves
    /// the queue unlinked.
    pub fn apply_link(&mut self, plan: LinkPlan) -> Linked {
        if plan.epoch != self.epoch {
            return Linked::Stale;
        }
        while let Some(&front) = self.pending.front() {
            if front == plan.slot {
                break;
            }
            if !self.deleted[front as usize] {
                return Linked::Stale;
            }
            self.queued[front as usize] = false;
            self.pending.pop_front();
        }
        if self.pending.pop_front() != Some(plan.slot) {
            return Linked::Stale;
        }
        self.queued[plan.slot as usize] = false;
        self.epoch += 1;
        if self.pending.is_empty() {
            self.pending.shrink_to_fit(); // a drained queue holds no memory
        }
        if self.deleted[plan.slot as usize] {
            return Linked::Dropped;
        }
        for (node, level, list) in &plan.lists {
            self.links.set(*node, *level, list);
        }
        let level = self.levels[plan.slot as usize];
        let entry = self.entry();
        if entry == NONE {
            self.entry.store(plan.slot, Relaxed);
        }
        self.attach(plan.slot);
        if entry != NONE && level > self.levels[entry as usize] {
            self.entry.store(plan.slot, Relaxed);
            self.hand_over_entry(entry, plan.slot);
        }
        Linked::Yes
    }

    /// Links up to `max_count` queued live slots (oldest first) on `threads` threads, beside
    /// searches; returns them, for [`Graph::finish_batch`]. The graph must have an entry point
    /// (link one slot first). A batch is not the graph one-at-a-time linking builds, but one
    /// as good.
    pub fn link_batch(&self, max_count: usize, threads: usize) -> Vec<u32> {
        let mut finished = self.linking.lock().unwrap_or_else(|e| e.into_inner());
        let batch: Vec<u32> = self.pending().take(max_count).collect();
        if self.entry() == NONE || batch.is_empty() {
            return Vec::new();
        }
        let next = AtomicUsize::new(0);
        let work = || loop {
            let i = next.fetch_add(1, Relaxed);
            let Some(&slot) = batch.get(i) else { break };
            self.link_now(slot);
        };
        let threads = threads.clamp(1, batch.len());
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(work);
            }
            work();
        });
        // A slot whose neighbours all lacked a parent while it linked gets one now.
        for &s in &batch {
            if self.links.parent(s) == NONE {
                self.attach(s);
            }
        }
        finished.extend_from_slice(&batch);
        batch
    }

    /// Links one slot at once, writing each list under its slot's lock (one at a time).
    /// Levels are written bottom up, each slot's own list before the back links: a slot
    /// another thread's walk can reach at some level already has its lists there and below
    /// (top down, a walk descending onto it found an empty level 0 and linked to it alone).
    fn link_now(&self, slot: u32) {
        let mut levels = Vec::new();
        self.neighbourhoods(slot, |level, chosen| levels.push((level, chosen)));
        for (level, chosen) in levels.into_iter().rev() {
            {
                let _own = self.links.lock(slot);
                self.links.set(slot, level, &chosen);
            }
            for &n in &chosen {
                let _theirs = self.links.lock(n);
                let indegree = |s: u32| self.links.indegree(s) as i64;
                if let Some(list) = self.with_back_link(n, slot, level, indegree) {
                    self.links.set(n, level, &list);
                }
            }
        }
        self.attach(slot);
        let level = self.levels[slot as usize];
        if level > self.levels[self.entry() as usize] {
            let _entry = self.entry_lock.lock();
            let old = self.entry();
            if level > self.levels[old as usize] {
                self.entry.store(slot, Relaxed);
                self.hand_over_entry(old, slot);
            }
        }
    }

    /// Gives a newly linked `slot` its parent: the nearest of its neighbours that has a parent
    /// itself and room for another child, whose level-0 list then holds `slot` for good. The
    /// first slot linked is its own parent. Parents are always older, so parent links form a
    /// tree; with [`Graph::hand_over_entry`] every slot stays reachable from the entry point.
    fn attach(&self, slot: u32) {
        if self.entry() == NONE || self.entry() == slot {
            self.links.set_parent(slot, slot);
            return;
        }
        let mine: Vec<u32> = self.links.list(slot, 0).collect();
        let cap = self.links.m0();
        for &n in &mine {
            if self.links.parent(n) == NONE || self.links.children(n) as usize >= cap / 2 {
                continue;
            }
            let _theirs = self.links.lock(n);
            let mut list: Vec<u32> = self.links.list(n, 0).collect();
            if !list.contains(&slot) {
                if list.len() < cap {
                    list.push(slot);
                } else {
                    // Replace the last entry that is not a child of `n`.
                    let Some(i) = (0..list.len())
                        .rev()
                        .find(|&i| self.links.parent(list[i]) != n)
                    else {
                        continue;
                    };
                    list[i] = slot;
                }
                self.links.set(n, 0, &list);
            }
            self.links.set_parent(slot, n);
            return;
        }
    }

    /// Makes the new entry point the parent of the old one (and holds it in its list), so
    /// the entry point reaches every slot through parent links.
    fn hand_over_entry(&self, old: u32, new: u32) {
        if old == NONE || old == new {
            return;
        }
        let _own = self.links.lock(new);
        let mut list: Vec<u32> = self.links.list(new, 0).collect();
        if !list.contains(&old) {
            if list.len() >= self.links.m0() {
                let Some(i) = (0..list.len())
                    .rev()
                    .find(|&i| self.links.parent(list[i]) != new)
                else {
                    return;
                };
                list[i] = old;
            } else {
                list.push(old);
            }
            self.links.set(new, 0, &list);
        }
        self.links.set_parent(old, new);
    }

    /// Takes the slots a [`Graph::link_batch`] linked off the queue: searches collect them
    /// from the graph from now on.
    pub fn finish_batch(&mut self, batch: &[u32]) {
        if batch.is_empty() {
            return;
        }
        for &s in batch {
            self.queued[s as usize] = false;
        }
        let finished = self.linking.get_mut().unwrap_or_else(|e| e.into_inner());
        finished.retain(|&s| self.queued[s as usize]); // another link's batch may still be queued
        while let Some(&front) = self.pending.front() {
            if self.queued[front as usize] && !self.deleted[front as usize] {
                break;
            }
            self.queued[front as usize] = false;
            self.pending.pop_front();
        }
        if self.pending.iter().any(|&s| !self.queued[s as usize]) {
            let done: HashSet<u32> = batch.iter().copied().collect();
            self.pending.retain(|s| !done.contains(s));
        }
        if self.pending.is_empty() {
            self.pending.shrink_to_fit();
        }
        self.epoch += 1;
    }

    /// `from`'s links at `level` once `to` joins them, pruned with the heuristic if full;
    /// `None` if `to` is there already. `indegree` tells how many level-0 lists hold a slot.
    fn with_back_link(
        &self,
        from: u32,
        to: u32,
        level: usize,
        indegree: impl Fn(u32) -> i64,
    ) -> Option<Vec<u32>> {
        let cap = if level == 0 {
            self.links.m0()
        } else {
            self.params.m
        };
        if self.links.contains(from, level, to) {
            return None;
        }
        let mut next: Vec<u32> = self.links.list(from, level).collect();
        next.push(to);
        if next.len() <= cap {
            return Some(next);
        }
        let base = self.code_query(from);
        let pool: Vec<Near> = next
            .iter()
            .map(|&s| Near {
                dist: self.approx(&base, s),
                slot: s,
            })
            .collect();
        let pool = tie_shuffled(from, pool);
        // Its children stay whatever the heuristic says; the rest compete for the room left.
        let (mut kept, rest): (Vec<u32>, Vec<Near>) = if level == 0 {
            let (children, rest): (Vec<Near>, Vec<Near>) = pool
                .iter()
                .partition(|c| c.slot != from && self.links.parent(c.slot) == from);
            (children.iter().map(|c| c.slot).collect(), rest)
        } else {
            (Vec::new(), pool.clone())
        };
        for c in self.select_neighbours(&rest, cap - kept.len().min(cap)) {
            kept.push(c);
        }
        if level == 0 {
            // A slot that few other lists hold keeps its place while there is room, the
            // nearest such first.
            for c in &pool {
                if kept.len() >= cap {
                    break;
                }
                let elsewhere = indegree(c.slot) - (c.slot != to) as i64;
                if elsewhere < MIN_HOLDERS && !kept.contains(&c.slot) {
                    kept.push(c.slot);
                }
            }
        }
        let least = cap.div_ceil(MIN_KEPT_DIVISOR);
        for c in &pool {
            if kept.len() >= least {
                break;
            }
            if !kept.contains(&c.slot) {
                kept.push(c.slot);
            }
        }
        Some(kept)
    }

    /// The neighbour-selection heuristic: walk candidates nearest first and keep one only if
    /// it is closer to the base than to every neighbour already kept (spreads the links out).
    /// A duplicate of a kept neighbour is never kept: it adds no direction.
    fn select_neighbours(&self, sorted: &[Near], max: usize) -> Vec<u32> {
        let mut kept: Vec<u32> = Vec::with_capacity(max);
        // Each candidate is measured from the kept slots: one query per slot kept, not one
        // per candidate looked at.
        let mut queries: Vec<Query> = Vec::with_capacity(max);
        for c in sorted {
            if kept.len() >= max {
                break;
            }
            if queries.iter().all(|k| self.approx(k, c.slot) > c.dist) {
                kept.push(c.slot);
                if kept.len() < max {
                    queries.push(self.code_query(c.slot));
                }
            }
        }
        kept
    }
}

/// `found` nearest first, equal distances in an order drawn from `base`: among duplicates,
/// each slot picks different ones, so no single copy collects every link.
fn tie_shuffled(base: u32, mut found: Vec<Near>) -> Vec<Near> {
    let mix = |s: u32| {
        let z = ((s as u64) << 32 | base as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z ^ (z >> 29)
    };
    found.sort_unstable_by(|a, b| {
        a.dist
            .total_cmp(&b.dist)
            .then(mix(a.slot).cmp(&mix(b.slot)))
    });
    found
}

#[cfg(test)]
mod tests;
