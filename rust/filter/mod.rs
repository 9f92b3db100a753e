//! Filters over shallow scalar metadata: parsed and validated once, then evaluated against many
//! records.
//!
//! Two dialects build the same tree:
//! - [`Filter::metadata`] is recall's `filter.metadata`: an object of `key: scalar` pairs, all of
//!   which must match. Keys must match `^[a-zA-Z_][a-zA-Z0-9_]*$`, be at most 128 characters and
//!   not be `__proto__`, `prototype` or `constructor`; values must be null, a string, a boolean
//!   or a finite number. Entries are checked in the order given and the first bad one is
//!   reported. `{}` means no filter.
//! - [`Filter::vector`] is the Mongo-style vector filter: `{field: scalar}` means `$eq`;
//!   `{field: {"$op": v, ...}}` ANDs its operators; several fields in one map AND; `$and` and
//!   `$or` take a non-empty list of filters; `$not` takes a filter at the top level and an
//!   operator map at field level; `$in`/`$nin` take a list of scalars; `$exists` takes a bool;
//!   `$gt $gte $lt $lte` take a number or a string. `{}` means no filter.
//!
//! Evaluation against a [`Record`]:
//! - Numbers compare numerically across integers and floats (`1 == 1.0`), exactly, even past
//!   2^53. A boolean never equals a number; a string only equals a string; null only equals an
//!   explicitly stored null, so a missing key never matches `$eq null`.
//! - Nested or unsupported stored values are present (for `$exists`) but equal nothing.
//! - `$gt $gte $lt $lte` order numbers against numbers and strings against strings
//!   (lexicographically, so ISO dates order by time); any other pairing is false.
//! - `$ne` and `$nin` match a missing key; `$eq`, `$in` and the orderings never do.
//! - `$exists: true` matches a present key (even one holding null); `$exists: false` a missing one.
//! - `$not` negates, so `{"a": {"$not": {"$gt": 1}}}` matches a record without `a`.

mod parse;

use std::cmp::Ordering;

pub use parse::{Input, MAX_DEPTH};

/// A stored scalar value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Box<str>),
    /// A nested or unsupported value: present, but equal to nothing.
    Other,
}

impl Value {
    /// The stored form of one input value: scalars keep their value, anything else is `Other`.
    pub fn from_input(input: Input) -> Value {
        match input {
            Input::Null => Value::Null,
            Input::Bool(b) => Value::Bool(b),
            Input::Int(i) => Value::Int(i),
            Input::Float(f) => Value::Float(f),
            Input::Str(s) => Value::Str(s.into()),
            Input::List(_) | Input::Map(_) | Input::Unsupported(_) => Value::Other,
        }
    }

    /// The value as a borrowed scalar.
    pub fn scalar(&self) -> Scalar<'_> {
        match self {
            Value::Null => Scalar::Null,
            Value::Bool(b) => Scalar::Bool(*b),
            Value::Int(i) => Scalar::Int(*i),
            Value::Float(f) => Scalar::Float(*f),
            Value::Str(s) => Scalar::Str(s),
            Value::Other => Scalar::Other,
        }
    }

    /// Filter equality: numbers numerically, other types only with their own type.
    pub fn equals(&self, other: &Value) -> bool {
        self.scalar().equals(other.scalar())
    }

    /// Filter ordering: numbers against numbers, strings against strings, otherwise none.
    pub fn order(&self, other: &Value) -> Option<Ordering> {
        self.scalar().order(other.scalar())
    }
}

/// A stored value, borrowed: what a filter compares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
    Other,
}

impl<'a> Scalar<'a> {
    /// Filter equality: numbers numerically, other types only with their own type.
    pub fn equals(self, other: Scalar<'_>) -> bool {
        match (self, other) {
            (Scalar::Null, Scalar::Null) => true,
            (Scalar::Bool(a), Scalar::Bool(b)) => a == b,
            (Scalar::Str(a), Scalar::Str(b)) => a == b,
            _ => compare_numbers(self, other) == Some(Ordering::Equal),
        }
    }

    /// Filter ordering: numbers against numbers, strings against strings, otherwise none.
    pub fn order(self, other: Scalar<'_>) -> Option<Ordering> {
        match (self, other) {
            (Scalar::Str(a), Scalar::Str(b)) => Some(a.cmp(b)),
            _ => compare_numbers(self, other),
        }
    }

    /// An owned copy.
    pub fn to_value(self) -> Value {
        match self {
            Scalar::Null => Value::Null,
            Scalar::Bool(b) => Value::Bool(b),
            Scalar::Int(i) => Value::Int(i),
            Scalar::Float(f) => Value::Float(f),
            Scalar::Str(s) => Value::Str(s.into()),
            Scalar::Other => Value::Other,
        }
    }
}

/// Exact comparison of two numeric values (no rounding of large integers); `None` if either
/// is not a number or is NaN.
fn compare_numbers(a: Scalar<'_>, b: Scalar<'_>) -> Option<Ordering> {
    match (a, b) {
        (Scalar::Int(x), Scalar::Int(y)) => Some(x.cmp(&y)),
        (Scalar::Float(x), Scalar::Float(y)) => x.partial_cmp(&y),
        (Scalar::Int(x), Scalar::Float(y)) => compare_int_float(x, y),
        (Scalar::Float(x), Scalar::Int(y)) => compare_int_float(y, x).map(Ordering::reverse),
        _ => None,
    }
}

/// What a filter reads: the value stored under a key. [`Record`] is the plain form; an index
/// keeps its records packed (see `records`).
pub trait Fields {
    /// The value stored under `key`, if any.
    fn field(&self, key: &str) -> Option<Scalar<'_>>;
}

impl Fields for Record {
    fn field(&self, key: &str) -> Option<Scalar<'_>> {
        self.get(key).map(Value::scalar)
    }
}

fn compare_int_float(i: i64, f: f64) -> Option<Ordering> {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if f.is_nan() {
        None
    } else if f >= TWO_POW_63 {
        Some(Ordering::Less)
    } else if f < -TWO_POW_63 {
        Some(Ordering::Greater)
    } else {
        let whole = f.trunc();
        Some(i.cmp(&(whole as i64)).then(if f > whole {
            Ordering::Less
        } else if f < whole {
            Ordering::Greater
        } else {
            Ordering::Equal
        }))
    }
}

/// The shallow metadata of one message or vector: keys sorted and binary-searched.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Record {
    entries: Vec<(Box<str>, Value)>,
}

impl Record {
    /// An empty record.
    pub fn new() -> Record {
        Record::default()
    }

    /// Builds a record from a map (later duplicates win); anything but a map gives an empty record.
    pub fn from_input(input: Input) -> Record {
        let mut record = Record::new();
        if let Input::Map(entries) = input {
            for (key, value) in entries {
                record.set(&key, Value::from_input(value));
            }
        }
        record
    }

    /// The value stored under `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.position(key).ok().map(|i| &self.entries[i].1)
    }

    /// Stores `value` under `key`, replacing any previous value.
    pub fn set(&mut self, key: &str, value: Value) {
        match self.position(key) {
            Ok(i) => self.entries[i].1 = value,
            Err(i) => self.entries.insert(i, (key.into(), value)),
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the record has no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (&**k, v))
    }

    fn position(&self, key: &str) -> std::result::Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| (**k).cmp(key))
    }
}

impl<K: AsRef<str>> FromIterator<(K, Value)> for Record {
    fn from_iter<I: IntoIterator<Item = (K, Value)>>(iter: I) -> Record {
        let mut record = Record::new();
        for (key, value) in iter {
            record.set(key.as_ref(), value);
        }
        record
    }
}

/// A parsed filter tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// Matches every record.
    All,
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
    Eq(Box<str>, Value),
    Ne(Box<str>, Value),
    Gt(Box<str>, Value),
    Gte(Box<str>, Value),
    Lt(Box<str>, Value),
    Lte(Box<str>, Value),
    In(Box<str>, Vec<Value>),
    Nin(Box<str>, Vec<Value>),
    Exists(Box<str>, bool),
}

impl Filter {
    /// Whether `record` passes this filter.
    pub fn matches<R: Fields + ?Sized>(&self, record: &R) -> bool {
        match self {
            Filter::All => true,
            Filter::And(children) => children.iter().all(|f| f.matches(record)),
            Filter::Or(children) => children.iter().any(|f| f.matches(record)),
            Filter::Not(child) => !child.matches(record),
            Filter::Eq(key, v) => record.field(key).is_some_and(|s| s.equals(v.scalar())),
            Filter::Ne(key, v) => !record.field(key).is_some_and(|s| s.equals(v.scalar())),
            Filter::Gt(key, v) => ordered(record, key, v, Ordering::is_gt),
            Filter::Gte(key, v) => ordered(record, key, v, Ordering::is_ge),
            Filter::Lt(key, v) => ordered(record, key, v, Ordering::is_lt),
            Filter::Lte(key, v) => ordered(record, key, v, Ordering::is_le),
            Filter::In(key, vs) => record
                .field(key)
                .is_some_and(|s| vs.iter().any(|v| s.equals(v.scalar()))),
            Filter::Nin(key, vs) => !record
                .field(key)
                .is_some_and(|s| vs.iter().any(|v| s.equals(v.scalar()))),
            Filter::Exists(key, wanted) => record.field(key).is_some() == *wanted,
        }
    }

    /// The keys this filter pins to a few values through a top-level `$eq` or `$in` reached
    /// only through ANDs, e.g. `{"thread_id": "t1"}` gives `[("thread_id", [Str("t1")])]`.
    /// A record can pass only if, for every entry, its value equals one of the listed values.
    pub fn pinned(&self) -> Vec<(&str, Vec<&Value>)> {
        let mut out = Vec::new();
        self.collect_pinned(&mut out);
        out
    }

    fn collect_pinned<'a>(&'a self, out: &mut Vec<(&'a str, Vec<&'a Value>)>) {
        match self {
            Filter::Eq(key, v) => out.push((key, vec![v])),
            Filter::In(key, vs) => out.push((key, vs.iter().collect())),
            Filter::And(children) => children.iter().for_each(|f| f.collect_pinned(out)),
            _ => {}
        }
    }

    /// The conjunction of `terms`, flattened: none gives `None`, one gives itself.
    fn all_of(mut terms: Vec<Filter>) -> Option<Filter> {
        terms.retain(|f| *f != Filter::All);
        match terms.len() {
            0 => None,
            1 => terms.pop(),
            _ => Some(Filter::And(terms)),
        }
    }
}

fn ordered<R: Fields + ?Sized>(
    record: &R,
    key: &str,
    v: &Value,
    accept: fn(Ordering) -> bool,
) -> bool {
    record
        .field(key)
        .and_then(|s| s.order(v.scalar()))
        .is_some_and(accept)
}

#[cfg(test)]
mod tests;
