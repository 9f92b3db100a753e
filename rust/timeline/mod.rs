//! The message timeline: an in-memory replica of the messages table that answers recall's
//! page, cursor and context-window questions without touching the database.
//!
//! Each message lives in a slot (id, thread, resource, created-at in µs, insertion `seq`,
//! shallow metadata and an opaque payload string). Each thread keeps its slots in a vector
//! sorted by `(created_at, seq)`, so order is total and stable and every question about one
//! thread is a binary search plus a walk over the answer; other threads are never visited.
//! Freed slots and thread/resource names are reused, so churn does not grow memory.
//!
//! Paging rules:
//! - A page holds the thread's messages that pass the resource, date and metadata filters and
//!   lie strictly between the cursors; `total` counts all of them, and the page is
//!   `[offset, offset + limit)` of them in the requested direction.
//! - With `after_id` the walk starts next to that message going forward, with only `before_id`
//!   it starts next to that message going backward, so the page holds the messages nearest the
//!   cursor; `offset` skips that many of the nearest first. The page is then returned in the
//!   requested direction.
//! - A cursor must name a message of the queried thread.

use std::collections::{HashMap, HashSet};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::{CoreError, Result};
use crate::filter::{Filter, Record};

/// One message as stored in the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub id: String,
    pub thread_id: String,
    pub resource_id: Option<String>,
    /// Microseconds since the Unix epoch.
    pub created_at: i64,
    /// Insertion sequence number: breaks ties in `created_at`.
    pub seq: u64,
    pub metadata: Record,
    /// An opaque string (JSON encoded by the caller); never parsed here.
    pub payload: Box<str>,
}

/// A borrowed view of one stored message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowRef<'a> {
    pub id: &'a str,
    pub thread_id: &'a str,
    pub resource_id: Option<&'a str>,
    pub created_at: i64,
    pub seq: u64,
    pub metadata: &'a Record,
    pub payload: &'a str,
}

/// One end of a date range, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub at: i64,
    pub exclusive: bool,
}

/// A page request over one thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct PageQuery<'a> {
    pub thread_id: &'a str,
    pub resource_id: Option<&'a str>,
    pub start: Option<Bound>,
    pub end: Option<Bound>,
    pub metadata: Option<&'a Filter>,
    pub descending: bool,
    pub offset: usize,
    /// `None` means every message.
    pub limit: Option<usize>,
    pub after_id: Option<&'a str>,
    pub before_id: Option<&'a str>,
}

/// A context-window request: a message and how many neighbours to bring on each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Include<'a> {
    pub id: &'a str,
    pub before: usize,
    pub after: usize,
}

/// Thread order: `(created_at, seq)`, with the slot number as a last tie-break so that every
/// entry has a unique position even if a caller reuses a `seq`.
type Key = (i64, u64, u32);

/// Up to this many keys of one thread per call are placed one by one with a binary search;
/// more are merged into the thread's line in one pass.
const BATCH_BY_SEARCH: usize = 32;

struct Slot {
    id: Box<str>,
    thread: u32,
    resource: Option<u32>,
    created_at: i64,
    seq: u64,
    metadata: Record,
    payload: Box<str>,
}

impl Slot {
    fn key(&self, slot: u32) -> Key {
        (self.created_at, self.seq, slot)
    }
}

/// Reference-counted string interning, so thread and resource names are stored once and
/// freed when their last message goes.
#[derive(Default)]
struct Names {
    ids: HashMap<Box<str>, u32>,
    names: Vec<(Box<str>, usize)>,
    free: Vec<u32>,
}

impl Names {
    fn acquire(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            self.names[id as usize].1 += 1;
            return id;
        }
        let entry = (Box::<str>::from(name), 1);
        let id = match self.free.pop() {
            Some(id) => {
                self.names[id as usize] = entry;
                id
            }
            None => {
                self.names.push(entry);
                (self.names.len() - 1) as u32
            }
        };
        self.ids.insert(name.into(), id);
        id
    }

    fn release(&mut self, id: u32) {
        let entry = &mut self.names[id as usize];
        entry.1 -= 1;
        if entry.1 == 0 {
            let name = std::mem::take(&mut entry.0);
            self.ids.remove(&name);
            self.free.push(id);
        }
    }

    fn lookup(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    fn name(&self, id: u32) -> &str {
        &self.names[id as usize].0
    }
}

/// The message timeline of every thread.
#[derive(Default)]
pub struct Timeline {
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    by_id: HashMap<Box<str>, u32>,
    /// By thread name number (the timeline's own numbers: a plain hash).
    threads: FxHashMap<u32, Vec<Key>>,
    names: Names,
}

impl Timeline {
    /// An empty timeline.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of messages held.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no message is held.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Inserts rows, replacing any message with the same id (which may move it to another
    /// thread). Later rows of the batch win over earlier ones with the same id.
    pub fn upsert(&mut self, rows: Vec<Row>) {
        let mut seen = HashSet::with_capacity(rows.len());
        let latest: Vec<bool> = rows
            .iter()
            .rev()
            .map(|r| seen.insert(r.id.as_str()))
            .collect();
        drop(seen);
        let mut added: HashMap<u32, Vec<Key>> = HashMap::new();
        for (row, latest) in rows.into_iter().zip(latest.into_iter().rev()) {
            if !latest {
                continue;
            }
            if let Some(&slot) = self.by_id.get(row.id.as_str()) {
                let (thread, key) = self.release_slot(slot);
                self.unlink(thread, vec![key]);
            }
            let thread = self.names.acquire(&row.thread_id);
            let resource = row.resource_id.as_deref().map(|r| self.names.acquire(r));
            let stored = Slot {
                id: row.id.into(),
                thread,
                resource,
                created_at: row.created_at,
                seq: row.seq,
                metadata: row.metadata,
                payload: row.payload,
            };
            let slot = match self.free.pop() {
                Some(slot) => slot,
                None => {
                    self.slots.push(None);
                    (self.slots.len() - 1) as u32
                }
            };
            added.entry(thread).or_default().push(stored.key(slot));
            self.by_id.insert(stored.id.clone(), slot);
            self.slots[slot as usize] = Some(stored);
        }
        for (thread, mut keys) in added {
            let line = self.threads.entry(thread).or_default();
            if keys.len() <= BATCH_BY_SEARCH {
                for key in keys {
                    let at = line.partition_point(|k| *k < key);
                    line.insert(at, key);
                }
            } else {
                // Two sorted runs: the stable sort merges them in linear time.
                keys.sort_unstable();
                line.extend(keys);
                line.sort();
            }
        }
    }

    /// Removes messages by id; returns how many were present.
    pub fn remove(&mut self, ids: &[&str]) -> usize {
        let mut removed: HashMap<u32, Vec<Key>> = HashMap::new();
        for id in ids {
            if let Some(&slot) = self.by_id.get(*id) {
                let (thread, key) = self.release_slot(slot);
                removed.entry(thread).or_default().push(key);
            }
        }
        let count = removed.values().map(Vec::len).sum();
        for (thread, keys) in removed {
            self.unlink(thread, keys);
        }
        count
    }

    /// Removes every message of a thread; returns how many there were.
    pub fn remove_thread(&mut self, thread_id: &str) -> usize {
        let Some(thread) = self.names.lookup(thread_id) else {
            return 0;
        };
        let keys = self.threads.remove(&thread).unwrap_or_default();
        for &(_, _, slot) in &keys {
            self.release_slot(slot);
        }
        keys.len()
    }

    /// The message with this id, if held.
    pub fn get(&self, id: &str) -> Option<RowRef<'_>> {
        self.by_id.get(id).map(|&slot| self.row(slot))
    }

    /// One page of a thread's messages (see the module doc) and the count of all that pass.
    pub fn page(&self, q: &PageQuery) -> Result<(Vec<RowRef<'_>>, usize)> {
        let Some(line) = self.line(q.thread_id) else {
            self.cursor_position(&[], q.thread_id, q.after_id.or(q.before_id))?;
            return Ok((Vec::new(), 0));
        };
        let mut lo = match q.start {
            Some(b) => line.partition_point(|k| k.0 < b.at || (b.exclusive && k.0 == b.at)),
            None => 0,
        };
        let mut hi = match q.end {
            Some(b) => line.partition_point(|k| k.0 < b.at || (!b.exclusive && k.0 == b.at)),
            None => line.len(),
        };
        if let Some(after) = self.cursor_position(line, q.thread_id, q.after_id)? {
            lo = lo.max(after + 1);
        }
        if let Some(before) = self.cursor_position(line, q.thread_id, q.before_id)? {
            hi = hi.min(before);
        }
        let range = if lo < hi { &line[lo..hi] } else { &[][..] };
        let forward = match (q.after_id, q.before_id) {
            (Some(_), _) => true,
            (None, Some(_)) => false,
            (None, None) => !q.descending,
        };
        let limit = q.limit.unwrap_or(usize::MAX);
        let resource = match q.resource_id {
            Some(name) => match self.names.lookup(name) {
                Some(id) => Some(id),
                None => return Ok((Vec::new(), 0)),
            },
            None => None,
        };
        let (mut page, total) = if resource.is_none() && q.metadata.is_none() {
            let skip = q.offset.min(range.len());
            let take = limit.min(range.len() - skip);
            let window = if forward {
                &range[skip..skip + take]
            } else {
                &range[range.len() - skip - take..range.len() - skip]
            };
            let mut page: Vec<RowRef> = window.iter().map(|k| self.row(k.2)).collect();
            if !forward {
                page.reverse();
            }
            (page, range.len())
        } else {
            let passes = |k: &&Key| {
                let slot = self.slot(k.2);
                resource.is_none_or(|r| slot.resource == Some(r))
                    && q.metadata.is_none_or(|f| f.matches(&slot.metadata))
            };
            let walk: Box<dyn Iterator<Item = &Key>> = if forward {
                Box::new(range.iter())
            } else {
                Box::new(range.iter().rev())
            };
            let mut page = Vec::new();
            let mut total = 0;
            for k in walk.filter(passes) {
                if total >= q.offset && total - q.offset < limit {
                    page.push(self.row(k.2));
                }
                total += 1;
            }
            (page, total)
        };
        if forward == q.descending {
            page.reverse();
        }
        Ok((page, total))
    }

    /// Each include's message plus up to `before`/`after` neighbours from its own thread,
    /// de-duplicated and sorted by `(created_at, seq)`. With `resource_id`, targets of other
    /// resources are skipped and neighbours are counted among the thread's messages of that
    /// resource only. Unknown ids are skipped.
    pub fn window(&self, includes: &[Include], resource_id: Option<&str>) -> Vec<RowRef<'_>> {
        let Some(scope) = self.scope(resource_id) else {
            return Vec::new();
        };
        let mut keys: Vec<Key> = Vec::new();
        for include in includes {
            let Some((key, earlier, later)) =
                self.slot_of(include.id).and_then(|s| self.around(s, scope))
            else {
                continue;
            };
            keys.push(key);
            keys.extend(earlier.take(include.before));
            keys.extend(later.take(include.after));
        }
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter().map(|k| self.row(k.2)).collect()
    }

    /// For each id, the ids of the messages right before and right after it in its thread
    /// (`None` past either end), under the same rules as [`Timeline::window`]; an unknown id,
    /// or one outside `resource_id`, has neither.
    pub fn adjacent(
        &self,
        ids: &[&str],
        resource_id: Option<&str>,
    ) -> Vec<(Option<&str>, Option<&str>)> {
        let Some(scope) = self.scope(resource_id) else {
            return vec![(None, None); ids.len()];
        };
        let id_of = |k: Key| &*self.slot(k.2).id;
        ids.iter()
            .map(
                |id| match self.slot_of(id).and_then(|s| self.around(s, scope)) {
                    Some((_, mut earlier, mut later)) => {
                        (earlier.next().map(id_of), later.next().map(id_of))
                    }
                    None => (None, None),
                },
            )
            .collect()
    }

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

    /// `Some(None)` for every resource, `Some(Some(r))` for a known one, `None` for an unknown
    /// one (it holds nothing).
    fn scope(&self, resource_id: Option<&str>) -> Option<Option<u32>> {
        match resource_id {
            Some(name) => self.names.lookup(name).map(Some),
            None => Some(None),
        }
    }

    /// The key of the message in live `slot` and its thread's keys before it (nearest first)
    /// and after it, counting only messages of `resource` when given; `None` when it is
    /// outside that resource.
    #[allow(clippy::type_complexity)]
    fn around(
        &self,
        slot: u32,
        resource: Option<u32>,
    ) -> Option<(
        Key,
        impl Iterator<Item = Key> + '_,
        impl Iterator<Item = Key> + '_,
    )> {
        let belongs = move |k: &Key| resource.is_none_or(|r| self.slot(k.2).resource == Some(r));
        let target = self.slot(slot);
        let key = target.key(slot);
        if !belongs(&key) {
            return None;
        }
        let line = &self.threads[&target.thread];
        let at = line.partition_point(|k| *k < key);
        let earlier = line[..at].iter().rev().copied().filter(move |k| belongs(k));
        let later = line[at + 1..].iter().copied().filter(move |k| belongs(k));
        Some((key, earlier, later))
    }

    fn slot_of(&self, id: &str) -> Option<u32> {
        self.by_id.get(id).copied()
    }

    fn line(&self, thread_id: &str) -> Option<&Vec<Key>> {
        self.names
            .lookup(thread_id)
            .and_then(|t| self.threads.get(&t))
    }

    /// Position of the cursor message `id` in `line`, the thread `thread_id`'s timeline.
    fn cursor_position(
        &self,
        line: &[Key],
        thread_id: &str,
        id: Option<&str>,
    ) -> Result<Option<usize>> {
        let Some(id) = id else {
            return Ok(None);
        };
        let found = self.by_id.get(id).and_then(|&slot| {
            let key = self.slot(slot).key(slot);
            line.binary_search(&key).ok()
        });
        match found {
            Some(at) => Ok(Some(at)),
            None => Err(CoreError::InvalidArgument(format!(
                "no message with id {id} in thread {thread_id}"
            ))),
        }
    }

    fn slot(&self, slot: u32) -> &Slot {
        self.slots[slot as usize]
            .as_ref()
            .expect("timeline keys point at live slots")
    }

    fn row(&self, slot: u32) -> RowRef<'_> {
        let s = self.slot(slot);
        RowRef {
            id: &s.id,
            thread_id: self.names.name(s.thread),
            resource_id: s.resource.map(|r| self.names.name(r)),
            created_at: s.created_at,
            seq: s.seq,
            metadata: &s.metadata,
            payload: &s.payload,
        }
    }

    /// Frees a live slot: its id, its name counts and the slot itself. The caller removes its
    /// key from the thread's line (see `unlink`) before any name is acquired again.
    fn release_slot(&mut self, slot: u32) -> (u32, Key) {
        let stored = self.slots[slot as usize]
            .take()
            .expect("released slots are live");
        self.by_id.remove(&stored.id);
        self.names.release(stored.thread);
        if let Some(r) = stored.resource {
            self.names.release(r);
        }
        self.free.push(slot);
        (stored.thread, stored.key(slot))
    }

    /// Removes keys from a thread's line, dropping the line when it empties.
    fn unlink(&mut self, thread: u32, keys: Vec<Key>) {
        let Some(line) = self.threads.get_mut(&thread) else {
            return;
        };
        if keys.len() <= BATCH_BY_SEARCH {
            for key in keys {
                if let Ok(at) = line.binary_search(&key) {
                    line.remove(at);
                }
            }
        } else {
            let doomed: HashSet<Key> = keys.into_iter().collect();
            line.retain(|k| !doomed.contains(k));
        }
        if line.is_empty() {
            self.threads.remove(&thread);
        }
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
    use crate::filter::{Input, Value};
    use proptest::prelude::*;

    fn row(id: &str, thread: &str, resource: Option<&str>, created_at: i64, seq: u64) -> Row {
        Row {
            id: id.into(),
            thread_id: thread.into(),
            resource_id: resource.map(Into::into),
            created_at,
            seq,
            metadata: Record::from_iter([("n", Value::Int(seq as i64 % 3))]),
            payload: format!("{{\"id\":\"{id}\"}}").into(),
        }
    }

    fn ids(rows: &[RowRef]) -> Vec<String> {
        rows.iter().map(|r| r.id.to_string()).collect()
    }

    /// Thread t1: m0..m9 at times 0,10,..,90 (m4 and m5 share time 40), seq = index.
    fn ten() -> Timeline {
        let mut t = Timeline::new();
        let rows = (0..10)
            .map(|i| {
                let at = if i == 5 { 40 } else { i as i64 * 10 };
                let resource = if i % 2 == 0 { "even" } else { "odd" };
                row(&format!("m{i}"), "t1", Some(resource), at, i)
            })
            .rev()
            .collect();
        t.upsert(rows);
        t.upsert(vec![row("x0", "t2", Some("even"), 5, 100)]);
        t
    }

    fn page(t: &Timeline, q: PageQuery) -> (Vec<String>, usize) {
        let (rows, total) = t.page(&q).unwrap();
        (ids(&rows), total)
    }

    fn q(thread_id: &str) -> PageQuery<'_> {
        PageQuery {
            thread_id,
            ..PageQuery::default()
        }
    }

    #[test]
    fn rows_are_ordered_by_time_then_seq() {
        let mut t = Timeline::new();
        t.upsert(vec![
            row("b", "t", None, 5, 2),
            row("a", "t", None, 5, 1),
            row("c", "t", None, 1, 9),
        ]);
        assert_eq!(
            page(&t, q("t")),
            (vec!["c".into(), "a".into(), "b".into()], 3)
        );
        let got = t.get("a").unwrap();
        assert_eq!(
            (got.thread_id, got.resource_id, got.created_at, got.seq),
            ("t", None, 5, 1)
        );
        assert_eq!(got.payload, "{\"id\":\"a\"}");
    }

    #[test]
    fn upsert_replaces_by_id_and_may_move_thread() {
        let mut t = ten();
        t.upsert(vec![row("m3", "t2", None, 1, 50)]);
        assert_eq!(t.len(), 11);
        assert_eq!(page(&t, q("t1")).1, 9);
        assert_eq!(page(&t, q("t2")).0, ["m3", "x0"]);
        assert_eq!(t.get("m3").unwrap().resource_id, None);
        t.upsert(vec![row("d", "t3", None, 1, 1), row("d", "t3", None, 2, 2)]);
        assert_eq!(t.get("d").unwrap().created_at, 2);
        assert_eq!(page(&t, q("t3")).1, 1);
    }

    #[test]
    fn remove_and_remove_thread_count_what_was_there() {
        let mut t = ten();
        assert_eq!(t.remove(&["m1", "m2", "nope", "m1"]), 2);
        assert_eq!(t.len(), 9);
        assert!(t.get("m1").is_none());
        assert_eq!(t.remove_thread("t1"), 8);
        assert_eq!(t.remove_thread("t1"), 0);
        assert_eq!(t.remove_thread("unknown"), 0);
        assert_eq!(t.len(), 1);
        assert_eq!(page(&t, q("t1")), (vec![], 0));
        assert_eq!(page(&t, q("t2")).0, ["x0"]);
    }

    #[test]
    fn date_bounds_are_inclusive_unless_exclusive() {
        let t = ten();
        let bounded = |start: (i64, bool), end: (i64, bool)| {
            page(
                &t,
                PageQuery {
                    start: Some(Bound {
                        at: start.0,
                        exclusive: start.1,
                    }),
                    end: Some(Bound {
                        at: end.0,
                        exclusive: end.1,
                    }),
                    ..q("t1")
                },
            )
        };
        assert_eq!(bounded((30, false), (40, false)).0, ["m3", "m4", "m5"]);
        assert_eq!(bounded((30, true), (40, false)).0, ["m4", "m5"]);
        assert_eq!(bounded((30, false), (40, true)).0, ["m3"]);
        assert_eq!(bounded((31, false), (39, false)), (vec![], 0));
        assert_eq!(bounded((90, false), (0, false)), (vec![], 0));
    }

    #[test]
    fn offset_and_limit_slice_in_the_requested_direction() {
        let t = ten();
        let asc = PageQuery {
            offset: 2,
            limit: Some(3),
            ..q("t1")
        };
        assert_eq!(
            page(&t, asc),
            (vec!["m2".into(), "m3".into(), "m4".into()], 10)
        );
        let desc = PageQuery {
            descending: true,
            ..asc
        };
        assert_eq!(
            page(&t, desc),
            (vec!["m7".into(), "m6".into(), "m5".into()], 10)
        );
        let past_end = PageQuery { offset: 20, ..asc };
        assert_eq!(page(&t, past_end), (vec![], 10));
        let all = PageQuery {
            descending: true,
            ..q("t1")
        };
        assert_eq!(page(&t, all).0.len(), 10);
        let none = PageQuery {
            limit: Some(0),
            ..q("t1")
        };
        assert_eq!(page(&t, none), (vec![], 10));
    }

    #[test]
    fn resource_and_metadata_filters_count_before_paging() {
        let t = ten();
        let odd = PageQuery {
            resource_id: Some("odd"),
            limit: Some(2),
            offset: 1,
            ..q("t1")
        };
        assert_eq!(page(&t, odd), (vec!["m3".into(), "m5".into()], 5));
        let desc = PageQuery {
            descending: true,
            ..odd
        };
        assert_eq!(page(&t, desc), (vec!["m7".into(), "m5".into()], 5));
        let unknown = PageQuery {
            resource_id: Some("nobody"),
            ..q("t1")
        };
        assert_eq!(page(&t, unknown), (vec![], 0));
        let input = Input::Map(vec![("n".into(), Input::Int(0))]);
        let f = Filter::metadata(&input).unwrap().unwrap();
        let meta = PageQuery {
            metadata: Some(&f),
            ..q("t1")
        };
        assert_eq!(
            page(&t, meta),
            (vec!["m0".into(), "m3".into(), "m6".into(), "m9".into()], 4)
        );
        let both = PageQuery {
            metadata: Some(&f),
            resource_id: Some("even"),
            ..q("t1")
        };
        assert_eq!(page(&t, both), (vec!["m0".into(), "m6".into()], 2));
    }

    #[test]
    fn cursors_bring_the_nearest_messages() {
        let t = ten();
        let after = PageQuery {
            after_id: Some("m4"),
            limit: Some(3),
            ..q("t1")
        };
        assert_eq!(
            page(&t, after),
            (vec!["m5".into(), "m6".into(), "m7".into()], 5)
        );
        let before = PageQuery {
            before_id: Some("m5"),
            limit: Some(3),
            ..q("t1")
        };
        assert_eq!(
            page(&t, before),
            (vec!["m2".into(), "m3".into(), "m4".into()], 5)
        );
        let before_desc = PageQuery {
            descending: true,
            ..before
        };
        assert_eq!(page(&t, before_desc).0, ["m4", "m3", "m2"]);
        let skip = PageQuery {
            offset: 1,
            ..before
        };
        assert_eq!(page(&t, skip).0, ["m1", "m2", "m3"]);
        let between = PageQuery {
            after_id: Some("m1"),
            before_id: Some("m4"),
            ..q("t1")
        };
        assert_eq!(page(&t, between), (vec!["m2".into(), "m3".into()], 2));
        let odd = PageQuery {
            after_id: Some("m2"),
            resource_id: Some("odd"),
            limit: Some(2),
            ..q("t1")
        };
        assert_eq!(page(&t, odd), (vec!["m3".into(), "m5".into()], 4));
    }

    #[test]
    fn cursors_are_stable_while_messages_arrive() {
        let mut t = ten();
        let before = PageQuery {
            before_id: Some("m5"),
            limit: Some(2),
            ..q("t1")
        };
        let first = page(&t, before);
        t.upsert(vec![row("late", "t1", None, 1000, 200)]);
        assert_eq!(page(&t, before), first);
    }

    #[test]
    fn unknown_cursor_is_an_error() {
        let t = ten();
        for (thread, cursor) in [("t1", "nope"), ("t1", "x0"), ("empty", "m1")] {
            let query = PageQuery {
                after_id: Some(cursor),
                ..q(thread)
            };
            assert_eq!(
                t.page(&query).unwrap_err(),
                CoreError::InvalidArgument(format!(
                    "no message with id {cursor} in thread {thread}"
                ))
            );
        }
    }

    fn window(
        t: &Timeline,
        includes: &[(&str, usize, usize)],
        resource: Option<&str>,
    ) -> Vec<String> {
        let includes: Vec<Include> = includes
            .iter()
            .map(|&(id, before, after)| Include { id, before, after })
            .collect();
        ids(&t.window(&includes, resource))
    }

    #[test]
    fn window_clips_merges_and_stays_in_the_thread() {
        let t = ten();
        assert_eq!(window(&t, &[("m1", 3, 1)], None), ["m0", "m1", "m2"]);
        assert_eq!(window(&t, &[("m8", 0, 5)], None), ["m8", "m9"]);
        assert_eq!(
            window(&t, &[("m6", 1, 1), ("m3", 1, 2), ("nope", 9, 9)], None),
            ["m2", "m3", "m4", "m5", "m6", "m7"]
        );
        assert_eq!(
            window(&t, &[("x0", 5, 5), ("m0", 0, 0)], None),
            ["m0", "x0"]
        );
        assert!(window(&t, &[], None).is_empty());
    }

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

    #[test]
    fn adjacent_names_each_messages_neighbours_in_its_thread() {
        let t = ten();
        assert_eq!(
            t.adjacent(&["m0", "m5", "m9", "x0", "nope"], None),
            [
                (None, Some("m1")),
                (Some("m4"), Some("m6")),
                (Some("m8"), None),
                (None, None),
                (None, None)
            ]
        );
        assert_eq!(
            t.adjacent(&["m5", "m4"], Some("odd")),
            [(Some("m3"), Some("m7")), (None, None)]
        );
        assert_eq!(t.adjacent(&["m5"], Some("nobody")), [(None, None)]);
    }

    #[test]
    fn window_with_resource_counts_only_that_resource() {
        let t = ten();
        assert_eq!(window(&t, &[("m5", 1, 1)], Some("odd")), ["m3", "m5", "m7"]);
        assert!(window(&t, &[("m4", 1, 1)], Some("odd")).is_empty());
        assert!(window(&t, &[("m4", 1, 1)], Some("nobody")).is_empty());
    }

    #[test]
    fn churn_reuses_slots_and_names() {
        let mut t = Timeline::new();
        for round in 0..50u64 {
            let rows = (0..20)
                .map(|i| {
                    row(
                        &format!("r{round}-{i}"),
                        &format!("t{round}"),
                        Some("r"),
                        i,
                        i as u64,
                    )
                })
                .collect();
            t.upsert(rows);
            assert_eq!(t.remove_thread(&format!("t{round}")), 20);
        }
        assert!(t.is_empty());
        assert_eq!(t.slots.len(), 20);
        assert!(t.names.names.len() <= 2);
        assert!(t.threads.is_empty() && t.by_id.is_empty() && t.names.ids.is_empty());
    }

    // ---- property tests against a naive model ----

    #[derive(Debug, Clone)]
    struct Spec {
        thread: u8,
        resource: Option<u8>,
        created_at: i64,
        n: i64,
    }

    fn arb_rows() -> impl Strategy<Value = Vec<Spec>> {
        prop::collection::vec(
            (0u8..3, prop::option::of(0u8..2), 0i64..8, 0i64..3).prop_map(
                |(thread, resource, created_at, n)| Spec {
                    thread,
                    resource,
                    created_at,
                    n,
                },
            ),
            0..40,
        )
    }

    fn build(specs: &[Spec]) -> Timeline {
        let mut t = Timeline::new();
        let rows = specs
            .iter()
            .enumerate()
            .map(|(i, s)| Row {
                id: format!("m{i}"),
                thread_id: format!("t{}", s.thread),
                resource_id: s.resource.map(|r| format!("r{r}")),
                created_at: s.created_at,
                seq: i as u64,
                metadata: Record::from_iter([("n", Value::Int(s.n))]),
                payload: "{}".into(),
            })
            .collect();
        t.upsert(rows);
        t
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

    /// Indices of a thread's rows in (created_at, seq) order.
    fn naive_line(specs: &[Spec], thread: u8) -> Vec<usize> {
        let mut line: Vec<usize> = (0..specs.len())
            .filter(|&i| specs[i].thread == thread)
            .collect();
        line.sort_by_key(|&i| (specs[i].created_at, i));
        line
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

        #[test]
        fn page_equals_naive_filter_sort_slice(
            specs in arb_rows(),
            thread in 0u8..3,
            resource in prop::option::of(0u8..2),
            start in prop::option::of((0i64..8, any::<bool>())),
            end in prop::option::of((0i64..8, any::<bool>())),
            n in prop::option::of(0i64..3),
            descending in any::<bool>(),
            offset in 0usize..6,
            limit in prop::option::of(0usize..6),
            cursor in prop::option::of((0usize..40, any::<bool>())),
        ) {
            let t = build(&specs);
            let line = naive_line(&specs, thread);
            let cursor = cursor.filter(|(c, _)| line.contains(c));
            let cursor_id = cursor.map(|(c, _)| format!("m{c}"));
            let filter = n.map(|n| Filter::metadata(&Input::Map(vec![("n".into(), Input::Int(n))])).unwrap().unwrap());
            let resource_name = resource.map(|r| format!("r{r}"));
            let thread_name = format!("t{thread}");
            let query = PageQuery {
                thread_id: &thread_name,
                resource_id: resource_name.as_deref(),
                start: start.map(|(at, exclusive)| Bound { at, exclusive }),
                end: end.map(|(at, exclusive)| Bound { at, exclusive }),
                metadata: filter.as_ref(),
                descending,
                offset,
                limit,
                after_id: cursor.filter(|c| c.1).and(cursor_id.as_deref()),
                before_id: cursor.filter(|c| !c.1).and(cursor_id.as_deref()),
            };
            let (rows, total) = t.page(&query).unwrap();

            let cursor_pos = cursor.map(|(c, after)| (line.iter().position(|&i| i == c).unwrap(), after));
            let mut passing: Vec<usize> = line.iter().enumerate().filter(|&(pos, &i)| {
                let s = &specs[i];
                resource.is_none_or(|r| s.resource == Some(r))
                    && n.is_none_or(|n| s.n == n)
                    && start.is_none_or(|(at, ex)| if ex { s.created_at > at } else { s.created_at >= at })
                    && end.is_none_or(|(at, ex)| if ex { s.created_at < at } else { s.created_at <= at })
                    && cursor_pos.is_none_or(|(c, after)| if after { pos > c } else { pos < c })
            }).map(|(_, &i)| i).collect();
            prop_assert_eq!(total, passing.len());
            let walk_backward = match cursor_pos { Some((_, after)) => !after, None => descending };
            if walk_backward { passing.reverse(); }
            let mut expected: Vec<String> = passing.iter().skip(offset).take(limit.unwrap_or(usize::MAX)).map(|i| format!("m{i}")).collect();
            if walk_backward != descending { expected.reverse(); }
            prop_assert_eq!(ids(&rows), expected);
        }

        /// Batches large enough to take both the one-by-one and the merging paths.
        #[test]
        fn batches_of_upserts_and_removes_match_a_naive_model(
            ops in prop::collection::vec(
                prop_oneof![
                    prop::collection::vec(
                        (0u32..100, prop_oneof![4 => Just(0u8), 1 => Just(1u8)], 0i64..20),
                        0..120,
                    ).prop_map(Ok),
                    prop::collection::vec(0u32..100, 0..200).prop_map(Err),
                ],
                1..6,
            ),
        ) {
            let mut t = Timeline::new();
            // id -> (thread, created_at, seq)
            let mut model: HashMap<u32, (u8, i64, u64)> = HashMap::new();
            let mut seq = 0u64;
            for op in ops {
                match op {
                    Ok(batch) => {
                        let rows = batch.iter().map(|&(id, thread, at)| {
                            seq += 1;
                            model.insert(id, (thread, at, seq));
                            row(&format!("m{id}"), &format!("t{thread}"), None, at, seq)
                        }).collect();
                        t.upsert(rows);
                    }
                    Err(ids) => {
                        let names: Vec<String> = ids.iter().map(|id| format!("m{id}")).collect();
                        let present = ids.iter().collect::<HashSet<_>>().into_iter()
                            .filter(|id| model.remove(id).is_some()).count();
                        prop_assert_eq!(t.remove(&names.iter().map(String::as_str).collect::<Vec<_>>()), present);
                    }
                }
                prop_assert_eq!(t.len(), model.len());
                for thread in 0u8..2 {
                    let mut expected: Vec<(i64, u64, u32)> = model.iter()
                        .filter(|(_, m)| m.0 == thread)
                        .map(|(&id, m)| (m.1, m.2, id)).collect();
                    expected.sort();
                    let name = format!("t{thread}");
                    let (rows, total) = t.page(&q(&name)).unwrap();
                    prop_assert_eq!(total, expected.len());
                    prop_assert_eq!(ids(&rows), expected.iter().map(|e| format!("m{}", e.2)).collect::<Vec<_>>());
                }
            }
        }

        #[test]
        fn window_is_sorted_deduplicated_clipped_and_in_thread(
            specs in arb_rows(),
            includes in prop::collection::vec((0usize..45, 0usize..4, 0usize..4), 0..5),
            resource in prop::option::of(0u8..2),
            removed in prop::collection::vec(0usize..40, 0..5),
        ) {
            let mut t = build(&specs);
            let removed_ids: Vec<String> = removed.iter().map(|i| format!("m{i}")).collect();
            t.remove(&removed_ids.iter().map(String::as_str).collect::<Vec<_>>());
            let alive = |i: usize| i < specs.len() && !removed.contains(&i);
            let in_resource = |i: usize| resource.is_none_or(|r| specs[i].resource == Some(r));

            let names: Vec<String> = includes.iter().map(|(i, _, _)| format!("m{i}")).collect();
            let request: Vec<Include> = includes.iter().zip(&names)
                .map(|(&(_, before, after), id)| Include { id, before, after }).collect();
            let got = t.window(&request, resource.map(|r| format!("r{r}")).as_deref());

            let mut expected: Vec<usize> = Vec::new();
            for &(target, before, after) in &includes {
                if !alive(target) || !in_resource(target) { continue; }
                let line: Vec<usize> = naive_line(&specs, specs[target].thread)
                    .into_iter().filter(|&i| alive(i) && in_resource(i)).collect();
                let at = line.iter().position(|&i| i == target).unwrap();
                expected.extend(&line[at.saturating_sub(before)..(at + after + 1).min(line.len())]);
            }
            expected.sort_by_key(|&i| (specs[i].created_at, i));
            expected.dedup();
            prop_assert_eq!(ids(&got), expected.iter().map(|i| format!("m{i}")).collect::<Vec<_>>());
        }
    }
}
