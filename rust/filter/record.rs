//! What a filter reads: stored scalar values, borrowed as scalars, and the records of
//! shallow metadata that hold them.

use std::cmp::Ordering;

use super::Input;

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
    pub(super) entries: Vec<(Box<str>, Value)>,
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
