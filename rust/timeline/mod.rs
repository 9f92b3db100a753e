//! The message timeline: an in-memory replica of the messages table that answers recall's
//! page, cursor and context-window questions without touching the database.
//!
//! Each message lives in a slot (id, thread, resource, created-at in µs, insertion `seq`,
//! shallow metadata and an opaque payload string). Each thread keeps its slots in a vector
//! sorted by `(created_at, seq)`, so order is total and stable and every question about one
//! thread is a binary search plus a walk over the answer; other threads are never visited.
//! Freed slots and thread/resource names are reused, so churn does not grow memory.
//!
//!
//! Paging lives in `page`, context windows in `window`, rank smoothing and fusion in `rank`.

mod page;
mod rank;
mod window;

pub use page::{Bound, PageQuery};
pub use rank::{best_first, Fusion};
pub use window::Include;

use std::collections::{HashMap, HashSet};

use rustc_hash::FxHashMap;

use crate::filter::Record;

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

    fn slot(&self, slot: u32) -> &Slot {
        self.slots[slot as usize]
            .as_ref()
            .expect("timeline keys point at live slots")
    }

    pub(crate) fn row(&self, slot: u32) -> RowRef<'_> {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::filter::Value;
    use proptest::prelude::*;

    pub(crate) fn row(
        id: &str,
        thread: &str,
        resource: Option<&str>,
        created_at: i64,
        seq: u64,
    ) -> Row {
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

    pub(crate) fn ids(rows: &[RowRef]) -> Vec<String> {
        rows.iter().map(|r| r.id.to_string()).collect()
    }

    /// Thread t1: m0..m9 at times 0,10,..,90 (m4 and m5 share time 40), seq = index.
    pub(crate) fn ten() -> Timeline {
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

    pub(crate) fn page(t: &Timeline, q: PageQuery) -> (Vec<String>, usize) {
        let (rows, total) = t.page(&q).unwrap();
        (ids(&rows), total)
    }

    pub(crate) fn q(thread_id: &str) -> PageQuery<'_> {
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
    pub(crate) struct Spec {
        pub(crate) thread: u8,
        pub(crate) resource: Option<u8>,
        pub(crate) created_at: i64,
        pub(crate) n: i64,
    }

    pub(crate) fn arb_rows() -> impl Strategy<Value = Vec<Spec>> {
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

    pub(crate) fn build(specs: &[Spec]) -> Timeline {
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

    /// Indices of a thread's rows in (created_at, seq) order.
    pub(crate) fn naive_line(specs: &[Spec], thread: u8) -> Vec<usize> {
        let mut line: Vec<usize> = (0..specs.len())
            .filter(|&i| specs[i].thread == thread)
            .collect();
        line.sort_by_key(|&i| (specs[i].created_at, i));
        line
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1500, rng_seed: proptest::test_runner::RngSeed::Fixed(0xc0de), ..ProptestConfig::default() })]

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
    }
}
