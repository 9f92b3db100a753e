//! The per-value slot lists of `thread_id` and `resource_id`, kept up to date on insert and
//! delete, which make a thread's or resource's exact scan touch only its own vectors.

use std::collections::HashMap;

use crate::filter::{Fields, Filter, Scalar, Value};

/// Metadata keys whose values get slot lists.
pub const POSTED_KEYS: [&str; 2] = ["resource_id", "thread_id"];

/// The slots holding one value of a posted key; may include tombstones, purged when they
/// reach half the list.
#[derive(Default, Debug)]
struct SlotList {
    slots: Vec<u32>,
    live: usize,
}

/// Per posted key, value → slots.
#[derive(Default, Debug)]
pub struct Postings {
    lists: [HashMap<Box<str>, SlotList>; POSTED_KEYS.len()],
}

impl Postings {
    pub fn add<R: Fields + ?Sized>(&mut self, slot: u32, record: &R) {
        for (key, map) in POSTED_KEYS.iter().zip(self.lists.iter_mut()) {
            if let Some(Scalar::Str(v)) = record.field(key) {
                let list = match map.get_mut(v) {
                    Some(list) => list,
                    None => map.entry(v.into()).or_default(),
                };
                list.slots.push(slot);
                list.live += 1;
            }
        }
    }

    /// Forgets a slot that `is_deleted` now reports as deleted.
    pub fn remove<R: Fields + ?Sized>(&mut self, record: &R, is_deleted: impl Fn(u32) -> bool) {
        for (key, map) in POSTED_KEYS.iter().zip(self.lists.iter_mut()) {
            if let Some(Scalar::Str(v)) = record.field(key) {
                if let Some(list) = map.get_mut(v) {
                    list.live -= 1;
                    if list.live == 0 {
                        map.remove(v);
                    } else if list.live * 2 < list.slots.len() {
                        list.slots.retain(|&s| !is_deleted(s));
                    }
                }
            }
        }
    }

    /// The slot lists that hold every vector `filter` can allow, through its most selective
    /// pinned posted key; `None` when no posted key is pinned to string values.
    pub(crate) fn candidates(&self, filter: &Filter) -> Option<Vec<&[u32]>> {
        self.candidates_for(filter).map(|(lists, _)| lists)
    }

    /// [`Postings::candidates`], also saying whether the lists are exactly what the filter
    /// allows (the filter is nothing but that one `$eq`/`$in`), so no record need be read.
    pub(crate) fn candidates_for(&self, filter: &Filter) -> Option<(Vec<&[u32]>, bool)> {
        let mut best: Option<(usize, Vec<&[u32]>, bool)> = None;
        for (key, values) in filter.pinned() {
            let Some(k) = POSTED_KEYS.iter().position(|p| *p == key) else {
                continue;
            };
            // Only string values are posted, so a key pinned to anything else cannot be used.
            let strings: Option<Vec<&str>> = values
                .iter()
                .map(|v| match v {
                    Value::Str(s) => Some(&**s),
                    _ => None,
                })
                .collect();
            let Some(mut strings) = strings else {
                continue;
            };
            strings.sort_unstable();
            strings.dedup();
            let lists: Vec<&[u32]> = strings
                .iter()
                .filter_map(|s| self.lists[k].get(*s))
                .map(|l| l.slots.as_slice())
                .collect();
            let total = lists.iter().map(|l| l.len()).sum();
            if best.as_ref().is_none_or(|(t, _, _)| total < *t) {
                let whole = matches!(filter, Filter::Eq(k, _) | Filter::In(k, _) if **k == *key);
                best = Some((total, lists, whole));
            }
        }
        best.map(|(_, lists, whole)| (lists, whole))
    }

    pub fn memory_bytes(&self) -> usize {
        self.lists
            .iter()
            .flat_map(|m| m.iter())
            .map(|(k, l)| k.len() + 64 + l.slots.capacity() * 4)
            .sum()
    }
}

/// The order vectors of one batch are stored in: by resource, then thread.
pub fn locality_key<R: Fields + ?Sized>(record: &R) -> [Option<&str>; 2] {
    POSTED_KEYS.map(|key| match record.field(key) {
        Some(Scalar::Str(s)) => Some(s),
        _ => None,
    })
}
