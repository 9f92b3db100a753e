//! Per metadata key of too many values to post (a timestamp, an integer id), its numeric
//! values sorted with their slots: an equality, `$in` or range on numbers is a binary search,
//! not a read of every record.
//!
//! New entries go to an unsorted tail, merged into the sorted run once it passes a share of
//! it, so inserts stay amortised O(log n) and a lookup reads one binary search plus the tail.
//! Deleted slots stay until they pass half the entries (readers skip them by the tombstones).

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::filter::Scalar;

/// The tail is merged once it holds this many entries and a 32nd of the sorted run.
const TAIL_MIN: usize = 4096;
const TAIL_SHARE: usize = 32;

/// A stored number, ordered exactly (integers against floats without rounding); an integral
/// float is kept as the integer it equals.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    /// The number a stored or filter value holds; `None` for NaN and every non-number.
    pub(crate) fn of(value: Scalar<'_>) -> Option<Num> {
        const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
        match value {
            Scalar::Int(i) => Some(Num::Int(i)),
            Scalar::Float(f) if f.is_nan() => None,
            Scalar::Float(f) if f.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&f) => {
                Some(Num::Int(f as i64))
            }
            Scalar::Float(f) => Some(Num::Float(f)),
            _ => None,
        }
    }

    fn scalar(self) -> Scalar<'static> {
        match self {
            Num::Int(i) => Scalar::Int(i),
            Num::Float(f) => Scalar::Float(f),
        }
    }
}

impl Ord for Num {
    fn cmp(&self, other: &Num) -> Ordering {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a.cmp(b),
            // Neither is NaN nor integral (see `of`): the plain order of floats is exact.
            (Num::Float(a), Num::Float(b)) => a.partial_cmp(b).unwrap_or(Ordering::Equal),
            // An integer of at most 53 bits is exact as a float, and never equals the
            // non-integral other.
            (Num::Int(a), Num::Float(b)) if a.unsigned_abs() < 1 << 53 => {
                (*a as f64).partial_cmp(b).unwrap_or(Ordering::Equal)
            }
            (Num::Float(a), Num::Int(b)) if b.unsigned_abs() < 1 << 53 => {
                a.partial_cmp(&(*b as f64)).unwrap_or(Ordering::Equal)
            }
            _ => self
                .scalar()
                .order(other.scalar())
                .unwrap_or(Ordering::Equal),
        }
    }
}

impl PartialOrd for Num {
    fn partial_cmp(&self, other: &Num) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Num {
    fn eq(&self, other: &Num) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Num {}

/// One end of a range: of numbers, or (on a key with slot lists) of strings.
#[derive(Debug, Clone, Copy)]
pub(crate) enum End<T = Num> {
    Open,
    Included(T),
    Excluded(T),
}

/// The numbers of one key with their slots.
#[derive(Debug, Default)]
pub(crate) struct Sorted {
    sorted: Vec<(Num, u32)>,
    tail: Vec<(Num, u32)>,
    /// Entries whose slot was deleted since.
    dead: usize,
    /// Values of this key that are not numbers (so not here); never decremented.
    pub(crate) others: usize,
}

impl Sorted {
    /// `entries` at once, with `others` values that are not numbers: what adding each in turn
    /// and settling the tail leaves, sorted once.
    pub(crate) fn of(mut entries: Vec<(Num, u32)>, others: usize) -> Sorted {
        entries.sort_unstable();
        Sorted {
            sorted: entries,
            others,
            ..Sorted::default()
        }
    }

    pub(crate) fn add(&mut self, value: Num, slot: u32) {
        self.tail.push((value, slot));
        if self.tail.len() >= TAIL_MIN.max(self.sorted.len() / TAIL_SHARE) {
            self.settle(|_| false);
        }
    }

    /// Merges the tail into the sorted run now (after a bulk build: its lookups then read no
    /// unsorted entries).
    pub(crate) fn settle_tail(&mut self) {
        if !self.tail.is_empty() {
            self.settle(|_| false);
        }
    }

    /// Notes that one entry's slot was deleted; past half the entries they are dropped.
    pub(crate) fn remove(&mut self, is_deleted: impl Fn(u32) -> bool) {
        self.dead += 1;
        if self.dead * 2 > self.sorted.len() + self.tail.len() {
            self.settle(is_deleted);
            self.dead = 0;
        }
    }

    /// Merges the tail into the sorted run, dropping the entries `drop` names.
    fn settle(&mut self, drop: impl Fn(u32) -> bool) {
        let mut tail = std::mem::take(&mut self.tail);
        tail.retain(|&(_, s)| !drop(s));
        tail.sort_unstable();
        let old = std::mem::take(&mut self.sorted);
        let mut merged = Vec::with_capacity(old.len() + tail.len());
        let (mut a, mut b) = (old.into_iter().peekable(), tail.into_iter().peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x <= y => a.next(),
                (Some(_), Some(_)) | (None, Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, None) => break,
            };
            if let Some(e) = next.filter(|&(_, s)| !drop(s)) {
                merged.push(e);
            }
        }
        self.sorted = merged;
    }

    /// The slots of every number between `lo` and `hi`, unordered.
    pub(crate) fn between(&self, lo: End, hi: End, out: &mut Vec<u32>) {
        let (run, tail) = self.within(lo, hi);
        out.extend(run.iter().map(|&(_, s)| s));
        out.extend(tail.map(|&(_, s)| s));
    }

    /// How many entries lie between `lo` and `hi` (deleted ones included): two binary
    /// searches and a count of the tail, nothing gathered.
    pub(crate) fn count_between(&self, lo: End, hi: End) -> usize {
        let (run, tail) = self.within(lo, hi);
        run.len() + tail.count()
    }

    /// The entries between `lo` and `hi`: a part of the sorted run, and those of the tail.
    fn within(&self, lo: End, hi: End) -> (&[(Num, u32)], impl Iterator<Item = &(Num, u32)> + '_) {
        let above = move |v: &Num| match lo {
            End::Open => true,
            End::Included(x) => *v >= x,
            End::Excluded(x) => *v > x,
        };
        let below = move |v: &Num| match hi {
            End::Open => true,
            End::Included(x) => *v <= x,
            End::Excluded(x) => *v < x,
        };
        let from = self.sorted.partition_point(|(v, _)| !above(v));
        let to = from + self.sorted[from..].partition_point(|(v, _)| below(v));
        let tail = self.tail.iter().filter(move |(v, _)| above(v) && below(v));
        (&self.sorted[from..to], tail)
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        (self.sorted.capacity() + self.tail.capacity()) * std::mem::size_of::<(Num, u32)>()
    }
}

/// Per key, its sorted numbers.
pub(crate) type Ranges = HashMap<Box<str>, Sorted>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_the_sorted_run_and_the_tail() {
        let mut s = Sorted::default();
        // More than TAIL_MIN entries: some merged, the rest in the tail.
        for i in 0..(TAIL_MIN as u32 + 500) {
            s.add(Num::Int(((i * 7919) % 10_000) as i64), i);
        }
        assert!(!s.tail.is_empty() && !s.sorted.is_empty());
        let mut got = Vec::new();
        s.between(
            End::Included(Num::Int(100)),
            End::Excluded(Num::Float(200.5)),
            &mut got,
        );
        got.sort_unstable();
        let want: Vec<u32> = (0..(TAIL_MIN as u32 + 500))
            .filter(|i| (100..=200).contains(&((i * 7919) % 10_000)))
            .collect();
        assert_eq!(got, want);
        // Merged now: the same answer from the sorted run alone.
        s.settle_tail();
        assert!(s.tail.is_empty());
        let mut again = Vec::new();
        s.between(
            End::Included(Num::Int(100)),
            End::Excluded(Num::Float(200.5)),
            &mut again,
        );
        again.sort_unstable();
        assert_eq!(again, want);
    }

    #[test]
    fn the_fast_orders_of_floats_and_small_integers_agree_with_the_exact_one() {
        let nums = [
            Num::Int(-3),
            Num::Int(0),
            Num::Int(7),
            Num::Int(i64::MAX),
            Num::Int(i64::MIN),
            Num::Float(-2.5),
            Num::Float(0.25),
            Num::Float(6.999),
            Num::Float(7.001),
            Num::Float(1e300),
            Num::Float(f64::NEG_INFINITY),
        ];
        for a in nums {
            for b in nums {
                let exact = a.scalar().order(b.scalar()).unwrap_or(Ordering::Equal);
                assert_eq!(a.cmp(&b), exact, "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn numbers_order_exactly_past_two_to_the_53() {
        let big = (1i64 << 53) + 1;
        assert!(Num::Int(big) > Num::Float((1i64 << 53) as f64));
        assert_eq!(Num::of(Scalar::Float(3.0)), Some(Num::Int(3)));
        assert_eq!(Num::of(Scalar::Float(f64::NAN)), None);
        assert_eq!(Num::of(Scalar::Str("3")), None);
    }
}
