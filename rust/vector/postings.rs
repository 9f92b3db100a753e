//! Per metadata key, value → the slots holding it, for every key of low enough cardinality:
//! kept up to date on insert and delete, ordered by value so a range filter reads a run of
//! lists. A key with too many values keeps its numbers sorted instead (see `ranges`). A filter
//! over such keys — any nesting of `$and $or $not`, equalities, `$in $nin $ne` and ranges —
//! is answered from them without reading one record (a negation as the complement of what
//! it excludes), and the planner counts what it allows instead of sampling.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;

use crate::filter::{Fields, Filter, Scalar, Value};
use crate::vector::ranges::{End, Num, Ranges, Sorted};

mod bulk;

/// Keys posted whatever their cardinality (one value per thread or resource).
pub const ALWAYS_POSTED: [&str; 2] = ["resource_id", "thread_id"];
/// A key holding more distinct values than this stops being posted (its lists would cost more
/// memory than they save reads); it stays unposted until the index is rebuilt.
pub const MAX_POSTED_VALUES: usize = 1024;

/// A posted value, totally ordered: null, then booleans, numbers (integers and floats compared
/// exactly, an integral float stored as the integer it equals), strings.
#[derive(Debug, Clone)]
enum Key {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Box<str>),
}

impl Key {
    /// The key of a stored or filter value; `None` for what equals nothing (NaN, nested).
    fn of(value: Scalar<'_>) -> Option<Key> {
        const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
        Some(match value {
            Scalar::Null => Key::Null,
            Scalar::Bool(b) => Key::Bool(b),
            Scalar::Int(i) => Key::Int(i),
            Scalar::Float(f) if f.is_nan() => return None,
            Scalar::Float(f) if f.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&f) => {
                Key::Int(f as i64)
            }
            Scalar::Float(f) => Key::Float(f),
            Scalar::Str(s) => Key::Str(s.into()),
            Scalar::Other => return None,
        })
    }

    fn rank(&self) -> u8 {
        match self {
            Key::Null => 0,
            Key::Bool(_) => 1,
            Key::Int(_) | Key::Float(_) => 2,
            Key::Str(_) => 3,
        }
    }

    fn scalar(&self) -> Scalar<'_> {
        match self {
            Key::Null => Scalar::Null,
            Key::Bool(b) => Scalar::Bool(*b),
            Key::Int(i) => Scalar::Int(*i),
            Key::Float(f) => Scalar::Float(*f),
            Key::Str(s) => Scalar::Str(s),
        }
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        self.rank()
            .cmp(&other.rank())
            .then_with(|| match (self, other) {
                (Key::Bool(a), Key::Bool(b)) => a.cmp(b),
                _ => self
                    .scalar()
                    .order(other.scalar())
                    .unwrap_or(Ordering::Equal),
            })
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Key {}

/// The slots holding one value of a posted key, ascending; may include tombstones, purged
/// when they reach half the list.
#[derive(Default, Debug)]
struct SlotList {
    slots: Vec<u32>,
    live: usize,
}

/// The slots a filter can allow, ascending (tombstones included) — or, when `complement`,
/// the slots it cannot allow — and whether that is exactly what it allows (no record need be
/// read) or only a bound on it.
#[derive(Debug)]
pub struct Candidates {
    pub slots: Vec<u32>,
    pub exact: bool,
    pub complement: bool,
}

impl Candidates {
    fn exactly(slots: Vec<u32>) -> Candidates {
        Candidates {
            slots,
            exact: true,
            complement: false,
        }
    }

    /// How many live slots pass at most, of `live` (tombstones in `slots` make it a little
    /// low for a complement, a little high otherwise).
    pub fn count(&self, live: usize) -> usize {
        if self.complement {
            live.saturating_sub(self.slots.len())
        } else {
            self.slots.len()
        }
    }

    /// The slots the negated filter allows: only an exact set can be negated.
    fn negated(self) -> Option<Candidates> {
        self.exact.then_some(Candidates {
            complement: !self.complement,
            ..self
        })
    }
}

/// Per posted key, value → slots.
#[derive(Default, Debug)]
pub struct Postings {
    lists: HashMap<Box<str>, BTreeMap<Key, SlotList>>,
    /// Keys that grew past [`MAX_POSTED_VALUES`].
    dropped: HashSet<Box<str>>,
    /// The numbers of the dropped keys, sorted.
    ranges: Ranges,
}

impl Postings {
    /// Posts `slot` (larger than every slot posted before) under each of its values.
    pub fn add<'a>(&mut self, slot: u32, entries: impl IntoIterator<Item = (&'a str, Scalar<'a>)>) {
        for (key, value) in entries {
            let Some(value) = Key::of(value) else {
                continue;
            };
            if self.dropped.contains(key) {
                let sorted = self.ranges.entry(key.into()).or_default();
                match Num::of(value.scalar()) {
                    Some(n) => sorted.add(n, slot),
                    None => sorted.others += 1,
                }
                continue;
            }
            let map = match self.lists.get_mut(key) {
                Some(map) => map,
                None => self.lists.entry(key.into()).or_default(),
            };
            let list = map.entry(value).or_default();
            list.slots.push(slot);
            list.live += 1;
            if map.len() > MAX_POSTED_VALUES && !ALWAYS_POSTED.contains(&key) {
                let mut sorted = Sorted::default();
                for (value, list) in self.lists.remove(key).into_iter().flatten() {
                    match Num::of(value.scalar()) {
                        Some(n) => list.slots.iter().for_each(|&s| sorted.add(n, s)),
                        None => sorted.others += list.live,
                    }
                }
                self.ranges.insert(key.into(), sorted);
                self.dropped.insert(key.into());
            }
        }
    }

    /// Sorts the numbers added since the last merge into their runs, so that a range reads
    /// binary searches only (worth its linear cost after a batch of [`SETTLE_BATCH`] or more).
    pub fn settle_ranges(&mut self) {
        self.ranges.values_mut().for_each(Sorted::settle_tail);
    }

    /// Forgets a slot that `is_deleted` now reports as deleted, given its entries.
    pub fn remove<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (&'a str, Scalar<'a>)>,
        is_deleted: impl Fn(u32) -> bool,
    ) {
        for (key, value) in entries {
            if let (Some(sorted), Some(_)) = (self.ranges.get_mut(key), Num::of(value)) {
                sorted.remove(&is_deleted);
                continue;
            }
            let (Some(map), Some(value)) = (self.lists.get_mut(key), Key::of(value)) else {
                continue;
            };
            if let Some(list) = map.get_mut(&value) {
                list.live -= 1;
                if list.live == 0 {
                    map.remove(&value);
                } else if list.live * 2 < list.slots.len() {
                    list.slots.retain(|&s| !is_deleted(s));
                }
            }
        }
    }

    /// Whether `key` has slot lists.
    pub fn is_posted(&self, key: &str) -> bool {
        self.lists.contains_key(key)
    }

    /// The slots `filter` can allow, from the lists and sorted numbers of the keys it names,
    /// in an index of `live` live vectors; `None` when they bound nothing (a string or
    /// `$exists` on a key of too many values, or the negation of a bound that is not exact).
    pub fn candidates(&self, filter: &Filter, live: usize) -> Option<Candidates> {
        self.bound(filter, false, live)
    }

    /// [`candidates`](Self::candidates); when `exact_only`, an `$and` gathers every range it
    /// holds rather than leaving one for the records to check (its set is to be negated).
    fn bound(&self, filter: &Filter, exact_only: bool, live: usize) -> Option<Candidates> {
        match filter {
            Filter::Eq(key, v) => self.union(key, [v]),
            Filter::In(key, vs) => self.union(key, vs.iter()),
            Filter::Ne(key, v) => self.excluding(key, [v], live),
            Filter::Nin(key, vs) => self.excluding(key, vs.iter(), live),
            Filter::Not(child) => self.bound(child, true, live)?.negated(),
            Filter::Gt(key, v) => self.range(key, v, Ordering::Greater, false),
            Filter::Gte(key, v) => self.range(key, v, Ordering::Greater, true),
            Filter::Lt(key, v) => self.range(key, v, Ordering::Less, false),
            Filter::Lte(key, v) => self.range(key, v, Ordering::Less, true),
            Filter::And(children) => {
                let mut exact = true;
                let (mut kept, mut excluded) = (Vec::new(), Vec::new());
                // Bounds on one sorted key make one interval: one lookup, not one per bound.
                let (intervals, children) = self.intervals(children);
                for c in children {
                    match self.bound(c, exact_only, live) {
                        Some(set) => {
                            exact &= set.exact;
                            if set.complement {
                                excluded.push(set.slots);
                            } else {
                                kept.push(set.slots);
                            }
                        }
                        None => exact = false,
                    }
                }
                // Narrowest interval first. One far wider than a set already kept is not
                // gathered: checking the kept set's records against it reads less.
                let mut intervals: Vec<_> = intervals
                    .into_iter()
                    .map(|((key, _), span)| (self.count_in(key, span), key, span))
                    .collect();
                intervals.sort_unstable_by_key(|&(count, ..)| count);
                let mut narrowest = kept.iter().map(Vec::len).min();
                // Gathered in the order of the values, not of the slots.
                let mut unordered = Vec::new();
                for (count, key, span) in intervals {
                    if !exact_only && narrowest.is_some_and(|n| n * CHECK_RATIO < count) {
                        exact = false;
                        continue;
                    }
                    let mut slots = Vec::new();
                    self.gather(key, span, &mut slots);
                    unordered.push(slots);
                    narrowest = Some(narrowest.map_or(count, |n| n.min(count)));
                }
                let excluded = excluded.into_iter().reduce(|a, b| union(&a, &b));
                kept.sort_by_key(Vec::len);
                let mut kept = kept.into_iter().reduce(|a, b| intersect(&a, &b));
                // A range narrows the set kept so far through a bitmap of its slots: no sort
                // of the range, no merge of two lists.
                for slots in unordered {
                    kept = Some(match kept {
                        Some(k) => marked_in(k, &slots),
                        None => ascending(slots),
                    });
                }
                let Some(kept) = kept else {
                    // Only negations: what passes is outside all they exclude.
                    let slots = excluded?;
                    return Some(Candidates {
                        slots,
                        exact,
                        complement: true,
                    });
                };
                let slots = match excluded {
                    Some(out) => difference(&kept, &out),
                    None => kept,
                };
                Some(Candidates {
                    slots,
                    exact,
                    complement: false,
                })
            }
            Filter::Or(children) => {
                let mut exact = true;
                let (mut kept, mut excluded) = (Vec::new(), Vec::new());
                for c in children {
                    let set = self.bound(c, exact_only, live)?;
                    exact &= set.exact;
                    if set.complement {
                        excluded.push(set.slots);
                    } else {
                        kept.push(set.slots);
                    }
                }
                let kept = kept.into_iter().reduce(|a, b| union(&a, &b));
                excluded.sort_by_key(Vec::len);
                let excluded = excluded.into_iter().reduce(|a, b| intersect(&a, &b));
                Some(match (kept, excluded) {
                    (Some(slots), None) => Candidates {
                        slots,
                        exact,
                        complement: false,
                    },
                    // Outside what every negation excludes, or in a kept set.
                    (kept, Some(out)) => Candidates {
                        slots: kept.map_or(out.clone(), |k| difference(&out, &k)),
                        exact,
                        complement: true,
                    },
                    (None, None) => return None,
                })
            }
            Filter::All => Candidates::exactly(Vec::new()).negated(),
            Filter::Exists(..) => None,
        }
    }

    /// The slots a `$ne` or `$nin` of `values` allows: outside the values' lists, or, when
    /// they name most of the key's values, every one of the `live` vectors holds `key` and the
    /// values' lists are the larger part, the other values' lists (a `$nin` of most values
    /// then reads no more than an `$in` of the rest).
    fn excluding<'v>(
        &self,
        key: &str,
        values: impl IntoIterator<Item = &'v Value>,
        live: usize,
    ) -> Option<Candidates> {
        let Some(map) = self.lists.get(key) else {
            return self.union(key, values)?.negated();
        };
        let out = keys_of(values);
        // Most values named (a look at every list costs no more than reading the filter did):
        // the other values' lists may hold the fewer slots.
        if out.len() * 2 > map.len() && map.values().map(|l| l.live).sum::<usize>() == live {
            let (mut excluded, mut kept) = (Vec::new(), Vec::new());
            for (value, list) in map {
                let side = if out.binary_search(value).is_ok() {
                    &mut excluded
                } else {
                    &mut kept
                };
                side.push(list.slots.as_slice());
            }
            let length = |lists: &[&[u32]]| lists.iter().map(|l| l.len()).sum::<usize>();
            if length(&kept) < length(&excluded) {
                return Some(Candidates::exactly(merge(kept)));
            }
        }
        Candidates::exactly(merge(named_lists(map, &out))).negated()
    }

    /// The bounds among `children` (and the children of any `$and` among them, as
    /// `{"ts": {"$gte": a, "$lt": b}}` is) joined into one interval per key and kind of value:
    /// numbers on a posted key or one of sorted numbers, strings on a posted key. Also the
    /// other children.
    #[allow(clippy::type_complexity)] // a map of intervals, and what is left
    fn intervals<'f>(
        &self,
        children: &'f [Filter],
    ) -> (HashMap<(&'f str, bool), Interval<'f>>, Vec<&'f Filter>) {
        let mut intervals: HashMap<(&str, bool), Interval> = HashMap::new();
        let mut rest = Vec::new();
        let mut conjuncts: Vec<&Filter> = children.iter().rev().collect();
        while let Some(c) = conjuncts.pop() {
            if let Filter::And(inner) = c {
                conjuncts.extend(inner.iter().rev());
                continue;
            }
            let bound = match c {
                Filter::Gt(key, v) => Some((key, v, Ordering::Greater, false)),
                Filter::Gte(key, v) => Some((key, v, Ordering::Greater, true)),
                Filter::Lt(key, v) => Some((key, v, Ordering::Less, false)),
                Filter::Lte(key, v) => Some((key, v, Ordering::Less, true)),
                _ => None,
            };
            match bound.and_then(|(key, v, side, inclusive)| {
                Some((key, self.interval(key, v.scalar(), side, inclusive)?))
            }) {
                Some((key, span)) => {
                    let strings = matches!(span, Interval::Strings(..));
                    intervals
                        .entry((key, strings))
                        .and_modify(|joined| joined.narrow(span))
                        .or_insert(span);
                }
                None => rest.push(c),
            }
        }
        (intervals, rest)
    }

    /// The interval one bound on `key` allows, when its slots can be read from the key's lists
    /// or sorted numbers: a number on either, a string on a posted key.
    fn interval<'v>(
        &self,
        key: &str,
        at: Scalar<'v>,
        side: Ordering,
        inclusive: bool,
    ) -> Option<Interval<'v>> {
        fn ends<T>(at: T, side: Ordering, inclusive: bool) -> (End<T>, End<T>) {
            let edge = if inclusive {
                End::Included(at)
            } else {
                End::Excluded(at)
            };
            if side == Ordering::Greater {
                (edge, End::Open)
            } else {
                (End::Open, edge)
            }
        }
        let posted = self.lists.contains_key(key);
        match (Num::of(at), at) {
            (Some(n), _) if posted || self.ranges.contains_key(key) => {
                let (lo, hi) = ends(n, side, inclusive);
                Some(Interval::Numbers(lo, hi))
            }
            (None, Scalar::Str(s)) if posted => {
                let (lo, hi) = ends(s, side, inclusive);
                Some(Interval::Strings(lo, hi))
            }
            _ => None,
        }
    }

    /// How many slots (deleted ones included) `span` of `key` holds: the lengths of its
    /// lists there, or a count in its sorted numbers.
    fn count_in(&self, key: &str, span: Interval) -> usize {
        match (self.lists.get(key), span) {
            (Some(map), _) => lists_in(map, span).map(|l| l.slots.len()).sum(),
            (None, Interval::Numbers(lo, hi)) => self.ranges[key].count_between(lo, hi),
            (None, Interval::Strings(..)) => unreachable!("strings bound posted keys only"),
        }
    }

    /// The slots `span` of `key` holds, appended to `out`: its lists there (each ascending),
    /// or the slots of its sorted numbers (in their order).
    fn gather(&self, key: &str, span: Interval, out: &mut Vec<u32>) {
        match (self.lists.get(key), span) {
            (Some(map), _) => lists_in(map, span).for_each(|l| out.extend_from_slice(&l.slots)),
            (None, Interval::Numbers(lo, hi)) => self.ranges[key].between(lo, hi, out),
            (None, Interval::Strings(..)) => unreachable!("strings bound posted keys only"),
        }
    }

    fn union<'v>(
        &self,
        key: &str,
        values: impl IntoIterator<Item = &'v Value>,
    ) -> Option<Candidates> {
        let Some(map) = self.lists.get(key) else {
            let Some(sorted) = self.ranges.get(key) else {
                // Never stored (or only as values equal to nothing): nothing passes.
                return (!self.dropped.contains(key)).then(|| Candidates::exactly(Vec::new()));
            };
            let mut slots = Vec::new();
            for v in values {
                match Num::of(v.scalar()) {
                    Some(n) => sorted.between(End::Included(n), End::Included(n), &mut slots),
                    None if sorted.others == 0 => {} // only numbers are stored: none equal it
                    None => return None,
                }
            }
            let mut slots = ascending(slots);
            slots.dedup();
            return Some(Candidates::exactly(slots));
        };
        Some(Candidates::exactly(merge(named_lists(
            map,
            &keys_of(values),
        ))))
    }

    /// The slots of every value of `key` on the `side` of `v` (numbers against numbers,
    /// strings against strings, as the filter compares them).
    fn range(&self, key: &str, v: &Value, side: Ordering, inclusive: bool) -> Option<Candidates> {
        if !self.lists.contains_key(key) && !self.ranges.contains_key(key) {
            return (!self.dropped.contains(key)).then(|| Candidates::exactly(Vec::new()));
        }
        let Some(span) = self.interval(key, v.scalar(), side, inclusive) else {
            // A null or boolean bound allows nothing (orderings hold only numbers and strings),
            // nor does a string on a key of sorted numbers that holds only numbers; a string
            // on one that also holds other values bounds nothing (its records are read).
            let nothing_passes = if self.lists.contains_key(key) {
                Key::of(v.scalar()).is_some()
            } else {
                self.ranges[key].others == 0
            };
            return nothing_passes.then(|| Candidates::exactly(Vec::new()));
        };
        let mut slots = Vec::new();
        self.gather(key, span, &mut slots);
        Some(Candidates::exactly(ascending(slots)))
    }

    pub fn memory_bytes(&self) -> usize {
        let lists: usize = self
            .lists
            .iter()
            .flat_map(|(k, m)| {
                m.values()
                    .map(move |l| k.len() + 64 + l.slots.capacity() * 4)
            })
            .sum();
        lists
            + self
                .ranges
                .values()
                .map(Sorted::memory_bytes)
                .sum::<usize>()
    }
}

/// Bounds on one key joined into one interval of its values: numbers (on a posted key or
/// one of sorted numbers), or strings (on a posted key).
#[derive(Debug, Clone, Copy)]
enum Interval<'v> {
    Numbers(End, End),
    Strings(End<&'v str>, End<&'v str>),
}

impl<'v> Interval<'v> {
    /// Narrows to the intersection with `other`, an interval of the same kind.
    fn narrow(&mut self, other: Interval<'v>) {
        fn both<T: Ord + Copy>(lo: &mut End<T>, hi: &mut End<T>, other: (End<T>, End<T>)) {
            *lo = tighter(*lo, other.0, Ordering::Greater);
            *hi = tighter(*hi, other.1, Ordering::Less);
        }
        match (self, other) {
            (Interval::Numbers(lo, hi), Interval::Numbers(a, b)) => both(lo, hi, (a, b)),
            (Interval::Strings(lo, hi), Interval::Strings(a, b)) => both(lo, hi, (a, b)),
            _ => unreachable!("intervals are joined by kind of value"),
        }
    }
}

/// The lists of a posted key's values within `span`. An open end of numbers reaches every
/// number and no other value (not the nulls, booleans and strings the key may also hold);
/// strings come last in the order of values, so an open upper end of strings is unbounded.
fn lists_in<'m>(
    map: &'m BTreeMap<Key, SlotList>,
    span: Interval,
) -> impl Iterator<Item = &'m SlotList> {
    fn bound<T>(end: End<T>, key: impl Fn(T) -> Key, open: Bound<Key>) -> Bound<Key> {
        match end {
            End::Open => open,
            End::Included(v) => Bound::Included(key(v)),
            End::Excluded(v) => Bound::Excluded(key(v)),
        }
    }
    let number = |n: Num| match n {
        Num::Int(i) => Key::Int(i),
        Num::Float(f) => Key::Float(f),
    };
    let string = |s: &str| Key::Str(s.into());
    let (lo, hi) = match span {
        Interval::Numbers(lo, hi) => (
            bound(lo, number, Bound::Included(Key::Float(f64::NEG_INFINITY))),
            bound(hi, number, Bound::Included(Key::Float(f64::INFINITY))),
        ),
        Interval::Strings(lo, hi) => (
            bound(lo, string, Bound::Included(string(""))),
            bound(hi, string, Bound::Unbounded),
        ),
    };
    // `BTreeMap::range` refuses a start after its end (or both equal and excluded).
    let empty = match (&lo, &hi) {
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a > b || (a == b && !matches!((&lo, &hi), (Bound::Included(_), Bound::Included(_))))
        }
        _ => false,
    };
    let lists = (!empty).then(|| map.range((lo, hi)));
    lists.into_iter().flatten().map(|(_, list)| list)
}

/// The posted keys of filter values, ascending, each once (values equal to nothing left out).
fn keys_of<'v>(values: impl IntoIterator<Item = &'v Value>) -> Vec<Key> {
    let mut keys: Vec<Key> = values
        .into_iter()
        .filter_map(|v| Key::of(v.scalar()))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The lists of these values of a posted key (the values it holds).
fn named_lists<'m>(map: &'m BTreeMap<Key, SlotList>, keys: &[Key]) -> Vec<&'m [u32]> {
    keys.iter()
        .filter_map(|k| map.get(k))
        .map(|l| l.slots.as_slice())
        .collect()
}

/// Ascending disjoint lists into one ascending list.
fn merge(lists: Vec<&[u32]>) -> Vec<u32> {
    match lists[..] {
        [] => Vec::new(),
        [one] => one.to_vec(),
        _ => ascending(lists.concat()),
    }
}

/// Distinct slots in any order, ascending: sorted when few or spread thin, else marked in a
/// bitmap read in order (linear, where a sort of 50,000 slots costs milliseconds).
fn ascending(mut slots: Vec<u32>) -> Vec<u32> {
    let top = slots.iter().max().map_or(0, |&s| s as usize + 1);
    if slots.len() < BITMAP_MIN || top / 64 > slots.len() * 8 {
        slots.sort_unstable();
        return slots;
    }
    let mut words = vec![0u64; top.div_ceil(64)];
    for &s in &slots {
        words[s as usize / 64] |= 1 << (s % 64);
    }
    slots.clear();
    for (w, &word) in words.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            slots.push((w * 64) as u32 + bits.trailing_zeros());
            bits &= bits - 1;
        }
    }
    slots
}

/// A batch of at least this many added vectors merges the new numbers into the sorted runs
/// (see `ranges`): a range query then scans no unsorted tail of up to 4,096 entries.
pub const SETTLE_BATCH: usize = 1024;

/// An `$and`'s range allowing more than this many times the slots of a set it already holds
/// is left for the records of that set to check: reading and matching one record costs about
/// as much as gathering this many slots of a range into a bitmap (measured on 50,000 records,
/// a set of 5,000 and a range of 50,000: about 50 ns a record checked, 1.7 ns a range slot).
const CHECK_RATIO: usize = 32;

/// Fewer slots than this are sorted, not marked in a bitmap.
const BITMAP_MIN: usize = 64;

/// The slots of ascending `kept` that are among `slots` (distinct, in any order).
fn marked_in(mut kept: Vec<u32>, slots: &[u32]) -> Vec<u32> {
    let Some(&top) = kept.last() else {
        return kept;
    };
    let mut words = vec![0u64; top as usize / 64 + 1];
    for &s in slots.iter().filter(|&&s| s <= top) {
        words[s as usize / 64] |= 1 << (s % 64);
    }
    kept.retain(|&s| words[s as usize / 64] & (1 << (s % 64)) != 0);
    kept
}

/// The slots in both ascending lists.
fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (mut i, mut j, mut out) = (0, 0, Vec::with_capacity(a.len().min(b.len())));
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

/// Of two ends of one side of an interval, the one that allows less: the larger lower end
/// (`side` Greater) or the smaller upper end (Less); at equal values the excluding one.
fn tighter<T: Ord + Copy>(a: End<T>, b: End<T>, side: Ordering) -> End<T> {
    let value = |e: End<T>| match e {
        End::Open => None,
        End::Included(n) | End::Excluded(n) => Some(n),
    };
    match (value(a), value(b)) {
        (None, _) => b,
        (_, None) => a,
        (Some(x), Some(y)) if x.cmp(&y) == side => a,
        (Some(x), Some(y)) if y.cmp(&x) == side => b,
        _ if matches!(a, End::Excluded(_)) => a,
        _ => b,
    }
}

/// The slots in either ascending list.
fn union(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (mut i, mut j, mut out) = (0, 0, Vec::with_capacity(a.len() + b.len()));
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// The slots of ascending `a` not in ascending `b`.
fn difference(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut j = 0;
    a.iter()
        .copied()
        .filter(|&s| {
            while j < b.len() && b[j] < s {
                j += 1;
            }
            j >= b.len() || b[j] != s
        })
        .collect()
}

/// The order vectors of one batch are stored in: by resource, then thread.
pub fn locality_key<R: Fields + ?Sized>(record: &R) -> [Option<&str>; 2] {
    ALWAYS_POSTED.map(|key| match record.field(key) {
        Some(Scalar::Str(s)) => Some(s),
        _ => None,
    })
}
