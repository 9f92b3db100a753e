//! The string ids of an index's slots, packed in one arena, and the lookup from an id to its
//! live slot: a table of slot numbers hashed by the id they name, so each id is stored once.
//! A few bytes per id beyond its text, against two separate allocations and a map entry.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

#[derive(Default)]
pub struct Ids {
    bytes: Vec<u8>,
    /// Where each slot's id ends in `bytes`.
    ends: Vec<u64>,
    /// The live slots, found by their id.
    live: HashTable<u32>,
}

fn text<'a>(bytes: &'a [u8], ends: &[u64], slot: u32) -> &'a str {
    let s = slot as usize;
    let from = if s == 0 { 0 } else { ends[s - 1] as usize };
    let raw = &bytes[from..ends[s] as usize];
    // SAFETY: `bytes` is only ever extended by whole `&str`s and `ends` marks where each
    // ends, so every slot's range is valid UTF-8 (checking it again on each read costs more
    // than the lookup it serves).
    unsafe { std::str::from_utf8_unchecked(raw) }
}

fn hash(id: &str) -> u64 {
    FxBuildHasher.hash_one(id)
}

impl Ids {
    /// Slots named, live or not.
    pub fn slots(&self) -> usize {
        self.ends.len()
    }

    /// Live ids.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// The id of `slot`.
    #[inline]
    pub fn get(&self, slot: u32) -> &str {
        text(&self.bytes, &self.ends, slot)
    }

    /// The live slot of `id`.
    pub fn find(&self, id: &str) -> Option<u32> {
        let (bytes, ends) = (&self.bytes, &self.ends);
        self.live
            .find(hash(id), |&s| text(bytes, ends, s) == id)
            .copied()
    }

    pub fn reserve(&mut self, additional: usize) {
        self.ends.reserve(additional);
        let (bytes, ends) = (&self.bytes, &self.ends);
        self.live
            .reserve(additional, |&s| hash(text(bytes, ends, s)));
    }

    /// Names the next slot `id`, live when `live` (the caller has removed any live `id`).
    pub fn push(&mut self, id: &str, live: bool) -> u32 {
        let slot = self.ends.len() as u32;
        self.bytes.extend_from_slice(id.as_bytes());
        self.ends.push(self.bytes.len() as u64);
        if live {
            let (bytes, ends) = (&self.bytes, &self.ends);
            self.live
                .insert_unique(hash(id), slot, |&s| hash(text(bytes, ends, s)));
        }
        slot
    }

    /// Makes the ids of `slots` live (a load's live slots); returns false when two of them
    /// name the same id (then which of them is live is unspecified).
    pub fn revive_all(&mut self, slots: impl Iterator<Item = u32>) -> bool {
        let (bytes, ends) = (&self.bytes, &self.ends);
        let hashed: Vec<(u64, u32)> = slots.map(|s| (hash(text(bytes, ends, s)), s)).collect();
        self.live
            .reserve(hashed.len(), |&s| hash(text(bytes, ends, s)));
        // In the order of the table's buckets (the low bits of the hash pick the bucket), near
        // enough: the inserts then walk the table once instead of landing all over it, a
        // cache and TLB miss each.
        let buckets = (self.live.capacity() + self.live.len())
            .saturating_mul(8)
            .div_ceil(7)
            .next_power_of_two();
        let mask = buckets as u64 - 1;
        let mut unique = true;
        for (h, slot) in in_bucket_order(&hashed, mask) {
            let id = text(bytes, ends, slot);
            let entry = self.live.entry(
                h,
                |&s| text(bytes, ends, s) == id,
                |&s| hash(text(bytes, ends, s)),
            );
            match entry {
                hashbrown::hash_table::Entry::Occupied(_) => unique = false,
                hashbrown::hash_table::Entry::Vacant(vacant) => {
                    vacant.insert(slot);
                }
            }
        }
        unique
    }

    /// Takes `id` out of the live ids; returns the slot it had.
    pub fn remove(&mut self, id: &str) -> Option<u32> {
        let (bytes, ends) = (&self.bytes, &self.ends);
        match self
            .live
            .find_entry(hash(id), |&s| text(bytes, ends, s) == id)
        {
            Ok(entry) => Some(entry.remove().0),
            Err(_) => None,
        }
    }

    /// Bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * 8 + self.live.capacity() * 5
    }
}

/// Groups of buckets `in_bucket_order` sorts into: a group's part of the table is a few KiB.
const GROUP_BITS: u32 = 11;

/// `hashed` ordered by the group of buckets (of `mask + 1`) that each hash falls in: a
/// counting sort, two passes over the entries instead of a comparison sort's many, and as
/// good for the table's cache as a full sort, since inserts within a group stay near.
fn in_bucket_order(hashed: &[(u64, u32)], mask: u64) -> Vec<(u64, u32)> {
    let shift = mask.count_ones().saturating_sub(GROUP_BITS);
    let group = |h: u64| ((h & mask) >> shift) as usize;
    let mut starts = vec![0usize; (1 << GROUP_BITS) + 1];
    for &(h, _) in hashed {
        starts[group(h) + 1] += 1;
    }
    for g in 1..starts.len() {
        starts[g] += starts[g - 1];
    }
    let mut ordered = vec![(0, 0); hashed.len()];
    for &(h, slot) in hashed {
        let at = &mut starts[group(h)];
        ordered[*at] = (h, slot);
        *at += 1;
    }
    ordered
}

impl std::ops::Index<usize> for Ids {
    type Output = str;

    fn index(&self, slot: usize) -> &str {
        self.get(slot as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_found_while_live() {
        let mut ids = Ids::default();
        for i in 0..1000 {
            ids.push(&format!("id-{i}"), i % 3 != 0);
        }
        ids.push("", true);
        assert_eq!((ids.slots(), ids.len()), (1001, 667));
        assert_eq!(ids.find("id-7"), Some(7));
        assert_eq!(ids.find("id-9"), None);
        assert_eq!(&ids[999], "id-999");
        assert_eq!(ids.find(""), Some(1000));
        assert_eq!(ids.remove("id-7"), Some(7));
        assert_eq!(ids.remove("id-7"), None);
        assert_eq!(ids.find("id-7"), None);
        assert_eq!(ids.get(7), "id-7");
        let again = ids.push("id-7", true);
        assert_eq!(ids.find("id-7"), Some(again));
        let old = ids.push("id-7", false);
        assert!(!ids.revive_all([old].into_iter()));
        assert_eq!(ids.find("id-7"), Some(again));
        assert!(ids.remove("id-7").is_some() && ids.revive_all([old].into_iter()));
        assert_eq!(ids.find("id-7"), Some(old));
        // A load's revival: every live slot found, duplicates noticed.
        let mut loaded = Ids::default();
        for i in 0..5000 {
            loaded.push(&format!("x{}", i % 4000), false);
        }
        assert!(loaded.revive_all(1000..5000));
        assert!((1000..5000).all(|s| loaded.find(loaded.get(s)) == Some(s)));
        assert_eq!(loaded.find("x0"), Some(4000));
        let mut twice = Ids::default();
        for i in 0..5000 {
            twice.push(&format!("x{}", i % 4000), false);
        }
        assert!(!twice.revive_all(0..5000));
    }
}
