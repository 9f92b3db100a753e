//! The metadata records of an index, packed: one key table per index, and every record's
//! entries encoded back to back in one byte arena.
//!
//! An entry is `key id (LEB128) | tag u8 | payload`, the payload being nothing (null, other),
//! one byte (bool), eight little-endian bytes (int, float) or a LEB128 length and UTF-8 bytes
//! (string). Entries keep the key order of [`Record`]. A record of two short strings takes
//! about a dozen bytes plus its eight-byte start, against a couple of hundred as separate
//! allocations.

use std::collections::HashMap;

use crate::filter::{Fields, Record, Scalar};

const NULL: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;
const INT: u8 = 3;
const FLOAT: u8 = 4;
const STR: u8 = 5;
const OTHER: u8 = 6;

/// Records by slot, in one arena.
#[derive(Debug, Default)]
pub struct RecordTable {
    keys: Vec<Box<str>>,
    key_ids: HashMap<Box<str>, u32, rustc_hash::FxBuildHasher>,
    bytes: Vec<u8>,
    /// Where each record starts in `bytes`; one more than there are records.
    starts: Vec<u64>,
}

/// One record of a [`RecordTable`], read in place.
#[derive(Clone, Copy)]
pub struct RecordRef<'a> {
    keys: &'a [Box<str>],
    bytes: &'a [u8],
}

impl RecordTable {
    pub fn new() -> RecordTable {
        RecordTable {
            starts: vec![0],
            ..RecordTable::default()
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes room for `additional` more records.
    pub fn reserve(&mut self, additional: usize) {
        self.starts.reserve(additional);
    }

    /// Appends a record; its position is the previous [`RecordTable::len`].
    pub fn push<'a>(&mut self, entries: impl IntoIterator<Item = (&'a str, Scalar<'a>)>) {
        for (key, value) in entries {
            let id = match self.key_ids.get(key) {
                Some(&id) => id,
                None => {
                    let id = self.keys.len() as u32;
                    self.keys.push(key.into());
                    self.key_ids.insert(key.into(), id);
                    id
                }
            };
            write_varint(&mut self.bytes, id as u64);
            match value {
                Scalar::Null => self.bytes.push(NULL),
                Scalar::Bool(b) => self.bytes.push(if b { TRUE } else { FALSE }),
                Scalar::Int(i) => {
                    self.bytes.push(INT);
                    self.bytes.extend_from_slice(&i.to_le_bytes());
                }
                Scalar::Float(f) => {
                    self.bytes.push(FLOAT);
                    self.bytes.extend_from_slice(&f.to_le_bytes());
                }
                Scalar::Str(s) => {
                    self.bytes.push(STR);
                    write_varint(&mut self.bytes, s.len() as u64);
                    self.bytes.extend_from_slice(s.as_bytes());
                }
                Scalar::Other => self.bytes.push(OTHER),
            }
        }
        self.starts.push(self.bytes.len() as u64);
    }

    /// Appends a [`Record`].
    pub fn push_record(&mut self, record: &Record) {
        self.push(record.iter().map(|(k, v)| (k, v.scalar())));
    }

    /// The record at `slot`.
    #[inline]
    pub fn get(&self, slot: u32) -> RecordRef<'_> {
        let (from, to) = (self.starts[slot as usize], self.starts[slot as usize + 1]);
        RecordRef {
            keys: &self.keys,
            bytes: &self.bytes[from as usize..to as usize],
        }
    }

    /// Heap bytes held, with `alloc` bytes of allocator overhead per allocation.
    pub fn memory_bytes(&self, alloc: usize) -> usize {
        self.bytes.capacity()
            + self.starts.capacity() * 8
            + self
                .keys
                .iter()
                .map(|k| 16 + k.len() + alloc)
                .sum::<usize>()
                * 2
            + self.key_ids.capacity() * 4
            + 3 * alloc
    }
}

impl<'a> RecordRef<'a> {
    /// The entries, in key order.
    pub fn iter(self) -> impl Iterator<Item = (&'a str, Scalar<'a>)> {
        let mut at = 0;
        std::iter::from_fn(move || {
            if at >= self.bytes.len() {
                return None;
            }
            let key = read_varint(self.bytes, &mut at) as usize;
            let tag = self.bytes[at];
            at += 1;
            let mut eight = || {
                let word: [u8; 8] = self.bytes[at..at + 8].try_into().unwrap_or_default();
                at += 8;
                word
            };
            let value = match tag {
                NULL => Scalar::Null,
                FALSE => Scalar::Bool(false),
                TRUE => Scalar::Bool(true),
                INT => Scalar::Int(i64::from_le_bytes(eight())),
                FLOAT => Scalar::Float(f64::from_le_bytes(eight())),
                STR => {
                    let n = read_varint(self.bytes, &mut at) as usize;
                    let text = &self.bytes[at..at + n];
                    at += n;
                    // SAFETY: written whole from a `&str` by `push`, so valid UTF-8.
                    Scalar::Str(unsafe { std::str::from_utf8_unchecked(text) })
                }
                _ => Scalar::Other,
            };
            Some((&*self.keys[key], value))
        })
    }

    /// The record as a plain [`Record`].
    pub fn to_record(self) -> Record {
        self.iter().map(|(k, v)| (k, v.to_value())).collect()
    }
}

impl Fields for RecordRef<'_> {
    #[inline]
    fn field(&self, key: &str) -> Option<Scalar<'_>> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

fn write_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

fn read_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let (mut x, mut shift) = (0u64, 0);
    loop {
        let b = bytes[*at];
        *at += 1;
        x |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return x;
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{Filter, Input, Value};

    fn sample() -> Vec<Record> {
        vec![
            Record::from_iter([
                ("thread_id", Value::Str("t1".into())),
                ("n", Value::Int(-7)),
                ("x", Value::Float(2.5)),
                ("ok", Value::Bool(true)),
                ("no", Value::Bool(false)),
                ("none", Value::Null),
                ("deep", Value::Other),
                ("text", Value::Str("é".repeat(200).into())),
            ]),
            Record::new(),
            Record::from_iter([("n", Value::Int(i64::MAX)), ("big", Value::Int(i64::MIN))]),
        ]
    }

    #[test]
    fn records_read_back_as_written() {
        let mut table = RecordTable::new();
        for r in &sample() {
            table.push_record(r);
        }
        assert_eq!(table.len(), 3);
        for (i, r) in sample().iter().enumerate() {
            assert_eq!(&table.get(i as u32).to_record(), r);
        }
        assert_eq!(
            table.get(0).field("text"),
            Some(Scalar::Str(&"é".repeat(200)))
        );
        assert_eq!(table.get(1).field("n"), None);
    }

    #[test]
    fn filters_read_packed_records_as_plain_ones() {
        let mut table = RecordTable::new();
        for r in &sample() {
            table.push_record(r);
        }
        let filters = [
            r#"{"thread_id": "t1"}"#,
            r#"{"n": {"$lt": 0}}"#,
            r#"{"n": {"$gte": 9223372036854775807}}"#,
            r#"{"x": 2.5, "ok": true}"#,
            r#"{"none": null}"#,
            r#"{"deep": {"$exists": true}}"#,
            r#"{"$or": [{"no": false}, {"big": {"$lt": 0}}]}"#,
            r#"{"thread_id": {"$nin": ["t1"]}}"#,
        ];
        for text in filters {
            let f = Filter::vector(&Input::from_json(text).unwrap())
                .unwrap()
                .unwrap();
            for (i, r) in sample().iter().enumerate() {
                assert_eq!(f.matches(&table.get(i as u32)), f.matches(r), "{text} {i}");
            }
        }
    }
}
