//! Posting many slots at once, as a load or a compaction does: each distinct value of a key
//! is found by hash, its slots gathered, and the ordered lists built once per value, instead
//! of an ordered lookup (and an owned copy of the value) per slot and key.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use super::{Key, Postings, SlotList, ALWAYS_POSTED, MAX_POSTED_VALUES};
use crate::filter::Scalar;
use crate::vector::ranges::{Num, Sorted};
use crate::vector::records::RecordTable;

/// A posted value as [`Key::of`] normalises it, borrowed from the record it is in: equal
/// exactly when the keys are (an integral float is the integer it equals; no NaN is kept,
/// so a float's bits name it).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Probe<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(u64),
    Str(&'a str),
}

impl<'a> Probe<'a> {
    fn of(value: Scalar<'a>) -> Option<Probe<'a>> {
        Some(match value {
            Scalar::Null => Probe::Null,
            Scalar::Bool(b) => Probe::Bool(b),
            Scalar::Str(s) => Probe::Str(s),
            Scalar::Other => return None,
            Scalar::Int(_) | Scalar::Float(_) => match Num::of(value)? {
                Num::Int(i) => Probe::Int(i),
                Num::Float(f) => Probe::Float(f.to_bits()),
            },
        })
    }

    fn key(self) -> Key {
        match self {
            Probe::Null => Key::Null,
            Probe::Bool(b) => Key::Bool(b),
            Probe::Int(i) => Key::Int(i),
            Probe::Float(bits) => Key::Float(f64::from_bits(bits)),
            Probe::Str(s) => Key::Str(s.into()),
        }
    }

    fn scalar(self) -> Scalar<'a> {
        match self {
            Probe::Null => Scalar::Null,
            Probe::Bool(b) => Scalar::Bool(b),
            Probe::Int(i) => Scalar::Int(i),
            Probe::Float(bits) => Scalar::Float(f64::from_bits(bits)),
            Probe::Str(s) => Scalar::Str(s),
        }
    }
}

type Map<K, V> = HashMap<K, V, FxBuildHasher>;

/// The numbers of a key with their slots, and how many of its values are not numbers.
type Numbers = (Vec<(Num, u32)>, usize);

/// Adds `slots`, all of the value `probe`, to a key's numbers.
fn add_numbers((entries, others): &mut Numbers, probe: &Probe<'_>, slots: &[u32]) {
    match Num::of(probe.scalar()) {
        Some(n) => entries.extend(slots.iter().map(|&s| (n, s))),
        None => *others += slots.len(),
    }
}

impl Postings {
    /// The postings of the records of `slots` (ascending): the same as adding each in turn.
    pub fn of_records(records: &RecordTable, slots: impl Iterator<Item = u32>) -> Postings {
        let mut groups: Map<&str, Map<Probe<'_>, Vec<u32>>> = Map::default();
        // Keys found past the limit, as adding one by one would have found: their numbers
        // with their slots, sorted once at the end, and how many of their values are not
        // numbers (no list per value gathered for them any more).
        let mut numbers: Map<&str, Numbers> = Map::default();
        for slot in slots {
            for (key, value) in records.get(slot).iter() {
                let Some(probe) = Probe::of(value) else {
                    continue;
                };
                if let Some(found) = numbers.get_mut(key) {
                    add_numbers(found, &probe, &[slot]);
                    continue;
                }
                let values = groups.entry(key).or_default();
                values.entry(probe).or_default().push(slot);
                if values.len() > MAX_POSTED_VALUES && !ALWAYS_POSTED.contains(&key) {
                    let mut found = (Vec::new(), 0);
                    for (value, slots) in groups.remove(key).unwrap_or_default() {
                        add_numbers(&mut found, &value, &slots);
                    }
                    numbers.insert(key, found);
                }
            }
        }
        let mut postings = Postings::default();
        for (key, (entries, others)) in numbers {
            postings
                .ranges
                .insert(key.into(), Sorted::of(entries, others));
            postings.dropped.insert(key.into());
        }
        for (key, values) in groups {
            let lists = values
                .into_iter()
                .map(|(value, slots)| {
                    let live = slots.len();
                    (value.key(), SlotList { slots, live })
                })
                .collect();
            postings.lists.insert(key.into(), lists);
        }
        postings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{Filter, Input};
    use crate::vector::ranges::End;

    #[test]
    fn posting_at_once_equals_posting_one_by_one() {
        // 3000 records: a key of few values of every type, one of too many numbers (with a
        // string among them), and the always-posted thread key.
        let mut records = RecordTable::new();
        for i in 0..3000i64 {
            let few = match i % 6 {
                0 => Scalar::Null,
                1 => Scalar::Bool(i % 4 == 1),
                2 => Scalar::Int(i % 5),
                3 => Scalar::Float((i % 5) as f64), // the same keys as the integers
                4 => Scalar::Float(0.5 + (i % 3) as f64),
                _ => Scalar::Str(["a", "b", "c"][(i % 3) as usize]),
            };
            let many = if i == 7 {
                Scalar::Str("x")
            } else {
                Scalar::Float(i as f64 / 2.0)
            };
            let thread = format!("t{}", i % 1500);
            records.push([
                ("few", few),
                ("many", many),
                ("thread_id", Scalar::Str(&thread)),
            ]);
        }
        let live = || (0..3000u32).filter(|s| s % 7 != 3);
        let mut one_by_one = Postings::default();
        for slot in live() {
            one_by_one.add(slot, records.get(slot).iter());
        }
        let at_once = Postings::of_records(&records, live());
        assert_eq!(
            format!("{:?}", at_once.lists.get("few")),
            format!("{:?}", one_by_one.lists.get("few"))
        );
        assert!(!at_once.is_posted("many") && !one_by_one.is_posted("many"));
        let (a, b) = (&at_once.ranges["many"], &one_by_one.ranges["many"]);
        assert_eq!(a.others, b.others);
        assert_eq!(
            a.count_between(End::Open, End::Open),
            b.count_between(End::Open, End::Open)
        );
        assert!(at_once.is_posted("thread_id"));
        let filters = [
            r#"{"few": 2}"#,
            r#"{"few": {"$in": [null, true, "b", 0.5]}}"#,
            r#"{"few": {"$gte": 1, "$lt": 3}}"#,
            r#"{"many": {"$gt": 100, "$lte": 400.5}}"#,
            r#"{"many": {"$ne": 3}}"#,
            r#"{"thread_id": {"$in": ["t3", "t1499"]}}"#,
        ];
        for text in filters {
            let f = Filter::vector(&Input::from_json(text).unwrap())
                .unwrap()
                .unwrap();
            let n = live().count();
            let (a, b) = (at_once.candidates(&f, n), one_by_one.candidates(&f, n));
            let norm = |c: Option<crate::vector::postings::Candidates>| {
                c.map(|mut c| {
                    c.slots.sort_unstable();
                    (c.slots, c.exact, c.complement)
                })
            };
            assert_eq!(norm(a), norm(b), "{text}");
        }
    }
}
