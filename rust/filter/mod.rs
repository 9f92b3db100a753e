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

use std::cmp::Ordering;

use crate::error::{CoreError, Result};

/// Deepest nesting a filter may have; deeper input is rejected rather than recursed into.
pub const MAX_DEPTH: usize = 32;

/// Longest key a metadata filter accepts.
const MAX_METADATA_KEY_LEN: usize = 128;

/// A JSON-like input tree, as converted from Python (so NaN, infinities and unsupported types
/// survive until they can be rejected with the right message) or from `serde_json`.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Input>),
    /// Entries in the order given.
    Map(Vec<(String, Input)>),
    /// A value of a type filters cannot hold; carries the type's name for messages.
    Unsupported(String),
}

impl Input {
    /// Parses JSON text into an input tree.
    pub fn from_json(text: &str) -> Result<Input> {
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|err| CoreError::InvalidFilter(format!("filter is not valid JSON: {err}")))?;
        Ok(Input::from(&value))
    }

    fn type_name(&self) -> &str {
        match self {
            Input::Null => "null",
            Input::Bool(_) => "bool",
            Input::Int(_) | Input::Float(_) => "number",
            Input::Str(_) => "string",
            Input::List(_) => "list",
            Input::Map(_) => "mapping",
            Input::Unsupported(name) => name,
        }
    }
}

impl From<&serde_json::Value> for Input {
    fn from(value: &serde_json::Value) -> Input {
        use serde_json::Value as J;
        match value {
            J::Null => Input::Null,
            J::Bool(b) => Input::Bool(*b),
            J::Number(n) => match n.as_i64() {
                Some(i) => Input::Int(i),
                None => Input::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            J::String(s) => Input::Str(s.clone()),
            J::Array(items) => Input::List(items.iter().map(Input::from).collect()),
            J::Object(entries) => Input::Map(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), Input::from(v)))
                    .collect(),
            ),
        }
    }
}

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
    /// Parses recall's `filter.metadata`; `{}` gives `None`.
    pub fn metadata(input: &Input) -> Result<Option<Filter>> {
        let Input::Map(entries) = input else {
            return Err(CoreError::FilterType(
                "Metadata filter must be an object.".into(),
            ));
        };
        let mut terms = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            if !is_metadata_key(key) {
                return Err(CoreError::InvalidFilter(format!(
                    "Invalid metadata filter key \"{key}\"."
                )));
            }
            let value = match value {
                Input::Float(f) if !f.is_finite() => None,
                Input::Null | Input::Bool(_) | Input::Int(_) | Input::Float(_) | Input::Str(_) => {
                    Some(Value::from_input(value.clone()))
                }
                _ => None,
            };
            let Some(value) = value else {
                return Err(CoreError::InvalidFilter(format!(
                    "Invalid metadata filter value for key \"{key}\". Values must be string, \
                     finite number, boolean, or null."
                )));
            };
            terms.push(Filter::Eq(key.as_str().into(), value));
        }
        Ok(Filter::all_of(terms))
    }

    /// Parses a Mongo-style vector filter; `{}` gives `None`.
    pub fn vector(input: &Input) -> Result<Option<Filter>> {
        if !matches!(input, Input::Map(_)) {
            return Err(CoreError::FilterType(
                "vector filter must be a mapping".into(),
            ));
        }
        match parse_document(input, "the filter", 0)? {
            Filter::All => Ok(None),
            filter => Ok(Some(filter)),
        }
    }

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

fn is_metadata_key(key: &str) -> bool {
    let mut chars = key.chars();
    let head_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    head_ok
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && key.len() <= MAX_METADATA_KEY_LEN
        && !matches!(key, "__proto__" | "prototype" | "constructor")
}

fn invalid(message: String) -> CoreError {
    CoreError::InvalidFilter(format!("invalid vector filter: {message}"))
}

fn check_depth(depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(invalid(format!("nested more than {MAX_DEPTH} levels deep")));
    }
    Ok(())
}

/// A filter document: a map of fields and top-level operators, ANDed. `what` names it in
/// messages.
fn parse_document(input: &Input, what: &str, depth: usize) -> Result<Filter> {
    check_depth(depth)?;
    let Input::Map(entries) = input else {
        return Err(invalid(format!(
            "{what} must be a mapping, not {}",
            input.type_name()
        )));
    };
    let mut terms = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        terms.push(match key.as_str() {
            "$and" | "$or" => {
                let children = parse_filter_list(key, value, depth)?;
                if key == "$and" {
                    Filter::all_of(children).unwrap_or(Filter::All)
                } else {
                    Filter::Or(children)
                }
            }
            "$not" => Filter::Not(Box::new(parse_document(
                value,
                "the value of \"$not\"",
                depth + 1,
            )?)),
            op if op.starts_with('$') => {
                return Err(invalid(format!("unknown operator \"{op}\"")));
            }
            field => parse_field(field, value, depth + 1)?,
        });
    }
    Ok(Filter::all_of(terms).unwrap_or(Filter::All))
}

fn parse_filter_list(op: &str, value: &Input, depth: usize) -> Result<Vec<Filter>> {
    match value {
        Input::List(items) if !items.is_empty() => items
            .iter()
            .map(|item| parse_document(item, &format!("each item of \"{op}\""), depth + 1))
            .collect(),
        _ => Err(invalid(format!(
            "\"{op}\" needs a non-empty list of filters"
        ))),
    }
}

/// The condition on one field: a scalar (`$eq`) or an operator map.
fn parse_field(field: &str, value: &Input, depth: usize) -> Result<Filter> {
    match value {
        Input::Map(_) => parse_operators(field, value, depth),
        _ => Ok(Filter::Eq(field.into(), scalar(field, "$eq", value)?)),
    }
}

/// An operator map on `field`: `{"$gt": 1, "$lt": 5}`, ANDed.
fn parse_operators(field: &str, value: &Input, depth: usize) -> Result<Filter> {
    check_depth(depth)?;
    let Input::Map(ops) = value else {
        return Err(invalid(format!(
            "\"$not\" on key \"{field}\" needs an operator mapping, not {}",
            value.type_name()
        )));
    };
    if ops.is_empty() {
        return Err(invalid(format!(
            "key \"{field}\" has an empty operator mapping"
        )));
    }
    let key: Box<str> = field.into();
    let mut terms = Vec::with_capacity(ops.len());
    for (op, operand) in ops {
        let k = key.clone();
        terms.push(match op.as_str() {
            "$eq" => Filter::Eq(k, scalar(field, op, operand)?),
            "$ne" => Filter::Ne(k, scalar(field, op, operand)?),
            "$gt" => Filter::Gt(k, orderable(field, op, operand)?),
            "$gte" => Filter::Gte(k, orderable(field, op, operand)?),
            "$lt" => Filter::Lt(k, orderable(field, op, operand)?),
            "$lte" => Filter::Lte(k, orderable(field, op, operand)?),
            "$in" => Filter::In(k, scalar_list(field, op, operand)?),
            "$nin" => Filter::Nin(k, scalar_list(field, op, operand)?),
            "$exists" => match operand {
                Input::Bool(b) => Filter::Exists(k, *b),
                other => {
                    return Err(invalid(format!(
                        "\"$exists\" on key \"{field}\" needs true or false, not {}",
                        other.type_name()
                    )))
                }
            },
            "$not" => Filter::Not(Box::new(parse_operators(field, operand, depth + 1)?)),
            other if other.starts_with('$') => {
                return Err(invalid(format!(
                    "unknown operator \"{other}\" on key \"{field}\""
                )))
            }
            other => {
                return Err(invalid(format!(
                    "key \"{field}\" holds a mapping with the non-operator key \"{other}\" \
                     (nested fields are not supported)"
                )))
            }
        });
    }
    Ok(Filter::all_of(terms).unwrap_or(Filter::All))
}

/// A scalar operand: null, bool, finite number or string.
fn scalar(field: &str, op: &str, value: &Input) -> Result<Value> {
    match value {
        Input::Float(f) if !f.is_finite() => Err(invalid(format!(
            "\"{op}\" on key \"{field}\" needs a finite number, not {f}"
        ))),
        Input::Null | Input::Bool(_) | Input::Int(_) | Input::Float(_) | Input::Str(_) => {
            Ok(Value::from_input(value.clone()))
        }
        other => Err(invalid(format!(
            "\"{op}\" on key \"{field}\" needs a string, finite number, boolean or null, not {}",
            other.type_name()
        ))),
    }
}

/// An ordering operand: a finite number or a string.
fn orderable(field: &str, op: &str, value: &Input) -> Result<Value> {
    match value {
        Input::Int(_) | Input::Float(_) | Input::Str(_) => scalar(field, op, value),
        other => Err(invalid(format!(
            "\"{op}\" on key \"{field}\" needs a number or a string, not {}",
            other.type_name()
        ))),
    }
}

fn scalar_list(field: &str, op: &str, value: &Input) -> Result<Vec<Value>> {
    match value {
        Input::List(items) => items.iter().map(|v| scalar(field, op, v)).collect(),
        other => Err(invalid(format!(
            "\"{op}\" on key \"{field}\" needs a list of scalars, not {}",
            other.type_name()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn input(v: serde_json::Value) -> Input {
        Input::from(&v)
    }

    fn record(v: serde_json::Value) -> Record {
        Record::from_input(input(v))
    }

    fn vector(v: serde_json::Value) -> Filter {
        Filter::vector(&input(v)).unwrap().unwrap()
    }

    fn vector_err(v: serde_json::Value) -> CoreError {
        Filter::vector(&input(v)).unwrap_err()
    }

    fn metadata_err(i: Input) -> String {
        match Filter::metadata(&i).unwrap_err() {
            CoreError::InvalidFilter(m) => m,
            other => panic!("expected InvalidFilter, got {other:?}"),
        }
    }

    #[test]
    fn record_keeps_keys_sorted_and_replaces() {
        let mut r = record(json!({"b": 1, "a": "x", "c": [1]}));
        assert_eq!(r.get("a"), Some(&Value::Str("x".into())));
        assert_eq!(r.get("c"), Some(&Value::Other));
        assert_eq!(r.get("z"), None);
        r.set("b", Value::Null);
        r.set("aa", Value::Bool(true));
        assert_eq!(r.get("b"), Some(&Value::Null));
        assert_eq!(r.len(), 4);
        let keys: Vec<&str> = r.entries.iter().map(|(k, _)| &**k).collect();
        assert_eq!(keys, ["a", "aa", "b", "c"]);
        assert!(Record::from_input(Input::Null).is_empty());
    }

    #[test]
    fn numbers_compare_across_int_and_float() {
        let r = record(json!({"n": 1, "f": 2.5}));
        assert!(vector(json!({"n": 1.0})).matches(&r));
        assert!(vector(json!({"f": {"$gt": 2}})).matches(&r));
        assert!(vector(json!({"n": {"$in": [3, 1.0]}})).matches(&r));
        assert!(!vector(json!({"n": {"$lt": 1}})).matches(&r));
    }

    #[test]
    fn large_integers_compare_exactly_with_floats() {
        let big = (1i64 << 53) + 1;
        let r = Record::from_iter([("n", Value::Int(big))]);
        let as_float = Filter::Eq("n".into(), Value::Float(big as f64));
        assert!(!as_float.matches(&r));
        assert!(Filter::Gt("n".into(), Value::Float(big as f64)).matches(&r));
        let r = Record::from_iter([("n", Value::Int(i64::MAX))]);
        assert!(Filter::Lt("n".into(), Value::Float(9.3e18)).matches(&r));
        assert!(Filter::Gt("n".into(), Value::Float(-1e300)).matches(&r));
    }

    #[test]
    fn bool_never_equals_number_and_str_only_str() {
        let r = record(json!({"b": true, "s": "1", "n": 1}));
        assert!(!vector(json!({"b": 1})).matches(&r));
        assert!(!vector(json!({"n": true})).matches(&r));
        assert!(!vector(json!({"s": 1})).matches(&r));
        assert!(!vector(json!({"n": "1"})).matches(&r));
        assert!(vector(json!({"b": true, "s": "1", "n": 1})).matches(&r));
    }

    #[test]
    fn null_matches_only_stored_null() {
        let stored = record(json!({"k": null}));
        let missing = record(json!({}));
        let f = vector(json!({"k": null}));
        assert!(f.matches(&stored));
        assert!(!f.matches(&missing));
        let m = Filter::metadata(&input(json!({"k": null})))
            .unwrap()
            .unwrap();
        assert!(m.matches(&stored));
        assert!(!m.matches(&missing));
    }

    #[test]
    fn other_values_are_present_but_equal_nothing() {
        let r = record(json!({"o": {"x": 1}}));
        assert!(!vector(json!({"o": null})).matches(&r));
        assert!(vector(json!({"o": {"$exists": true}})).matches(&r));
        assert!(vector(json!({"o": {"$ne": 1}})).matches(&r));
        assert!(!vector(json!({"o": {"$gte": 0}})).matches(&r));
    }

    #[test]
    fn orderings_pair_numbers_with_numbers_and_strings_with_strings() {
        let r = record(json!({"d": "2024-05-01T10:00:00Z", "n": 5, "b": true}));
        assert!(vector(json!({"d": {"$gte": "2024-01-01", "$lt": "2025"}})).matches(&r));
        assert!(!vector(json!({"d": {"$gt": 1}})).matches(&r));
        assert!(!vector(json!({"n": {"$gt": "1"}})).matches(&r));
        assert!(!vector(json!({"b": {"$gte": 0}})).matches(&r));
        assert!(vector(json!({"n": {"$gte": 5, "$lte": 5}})).matches(&r));
        assert!(!vector(json!({"missing": {"$lt": 100}})).matches(&r));
    }

    #[test]
    fn ne_and_nin_match_missing_keys() {
        let r = record(json!({"a": 1}));
        assert!(vector(json!({"z": {"$ne": 1}})).matches(&r));
        assert!(vector(json!({"z": {"$nin": [1]}})).matches(&r));
        assert!(!vector(json!({"a": {"$ne": 1.0}})).matches(&r));
        assert!(!vector(json!({"a": {"$nin": [2, 1]}})).matches(&r));
        assert!(!vector(json!({"z": {"$in": [null]}})).matches(&r));
    }

    #[test]
    fn exists_checks_presence() {
        let r = record(json!({"a": null}));
        assert!(vector(json!({"a": {"$exists": true}})).matches(&r));
        assert!(!vector(json!({"a": {"$exists": false}})).matches(&r));
        assert!(vector(json!({"b": {"$exists": false}})).matches(&r));
    }

    #[test]
    fn logical_operators_combine() {
        let r = record(json!({"a": 1, "b": "x"}));
        assert!(vector(json!({"$or": [{"a": 2}, {"b": "x"}]})).matches(&r));
        assert!(!vector(json!({"$and": [{"a": 1}, {"b": "y"}]})).matches(&r));
        assert!(vector(json!({"$not": {"a": 2}})).matches(&r));
        assert!(!vector(json!({"a": 1, "b": "y"})).matches(&r));
        assert!(vector(json!({"z": {"$not": {"$gt": 1}}})).matches(&r));
        assert!(!vector(json!({"a": {"$not": {"$gte": 1}}})).matches(&r));
        assert_eq!(Filter::vector(&input(json!({}))).unwrap(), None);
        assert_eq!(Filter::vector(&input(json!({"$and": [{}]}))).unwrap(), None);
    }

    #[test]
    fn pinned_follows_and_paths_only() {
        let f = vector(json!({"thread_id": "t1", "$and": [{"r": {"$in": [1, 2]}}],
                              "$or": [{"x": 1}, {"y": 2}], "n": {"$gt": 3}}));
        let s = Value::Str("t1".into());
        // serde_json sorts object keys, so "$and" comes first.
        assert_eq!(
            f.pinned(),
            vec![
                ("r", vec![&Value::Int(1), &Value::Int(2)]),
                ("thread_id", vec![&s])
            ]
        );
        assert!(vector(json!({"$not": {"a": 1}})).pinned().is_empty());
    }

    #[test]
    fn vector_filter_errors_name_the_key_or_operator() {
        assert_eq!(
            vector_err(json!([1])),
            CoreError::FilterType("vector filter must be a mapping".into())
        );
        let cases = [
            (json!({"a": {"$foo": 1}}), "$foo"),
            (json!({"$foo": 1}), "$foo"),
            (json!({"a": [1, 2]}), "\"a\""),
            (json!({"a": {"b": 1}}), "\"a\""),
            (json!({"a": {}}), "\"a\""),
            (json!({"$and": []}), "$and"),
            (json!({"$or": {"a": 1}}), "$or"),
            (json!({"$and": [1]}), "$and"),
            (json!({"a": {"$in": 1}}), "$in"),
            (json!({"a": {"$nin": [[1]]}}), "$nin"),
            (json!({"a": {"$exists": 1}}), "$exists"),
            (json!({"a": {"$gt": null}}), "$gt"),
            (json!({"a": {"$lte": [1]}}), "$lte"),
            (json!({"a": {"$not": 1}}), "$not"),
            (json!({"$not": 1}), "$not"),
            (json!({"a": {"$and": [{"a": 1}]}}), "$and"),
        ];
        for (filter, needle) in cases {
            match vector_err(filter.clone()) {
                CoreError::InvalidFilter(m) => {
                    assert!(m.contains(needle), "{filter}: {m:?} lacks {needle}")
                }
                other => panic!("{filter}: {other:?}"),
            }
        }
        let nan = Input::Map(vec![("a".into(), Input::Float(f64::NAN))]);
        assert!(
            matches!(Filter::vector(&nan), Err(CoreError::InvalidFilter(m)) if m.contains("\"a\""))
        );
        let odd = Input::Map(vec![("a".into(), Input::Unsupported("datetime".into()))]);
        assert!(
            matches!(Filter::vector(&odd), Err(CoreError::InvalidFilter(m)) if m.contains("datetime"))
        );
    }

    #[test]
    fn deep_nesting_is_rejected_not_overflowed() {
        let mut f = json!({"a": 1});
        for _ in 0..(MAX_DEPTH + 2) {
            f = json!({"$not": f});
        }
        assert!(matches!(vector_err(f), CoreError::InvalidFilter(m) if m.contains("deep")));
    }

    #[test]
    fn metadata_filter_reference_messages() {
        assert_eq!(
            Filter::metadata(&Input::Null).unwrap_err(),
            CoreError::FilterType("Metadata filter must be an object.".into())
        );
        assert_eq!(
            Filter::metadata(&Input::List(vec![])).unwrap_err(),
            CoreError::FilterType("Metadata filter must be an object.".into())
        );
        assert_eq!(Filter::metadata(&input(json!({}))).unwrap(), None);
        let long = "k".repeat(129);
        for key in [
            "1abc",
            "a-b",
            "__proto__",
            "constructor",
            "prototype",
            "",
            &long,
        ] {
            let i = Input::Map(vec![(key.to_string(), Input::Int(1))]);
            assert_eq!(
                metadata_err(i),
                format!("Invalid metadata filter key \"{key}\".")
            );
        }
        let ok = Input::Map(vec![("k".repeat(128), Input::Int(1))]);
        assert!(Filter::metadata(&ok).unwrap().is_some());
        for bad in [
            Input::Float(f64::NAN),
            Input::Float(f64::INFINITY),
            Input::Float(f64::NEG_INFINITY),
            Input::Map(vec![]),
            Input::List(vec![]),
            Input::Unsupported("datetime".into()),
        ] {
            let i = Input::Map(vec![("k".into(), bad)]);
            assert_eq!(
                metadata_err(i),
                "Invalid metadata filter value for key \"k\". Values must be string, finite \
                 number, boolean, or null."
            );
        }
    }

    #[test]
    fn metadata_filter_reports_first_bad_entry_in_given_order() {
        let i = Input::Map(vec![
            ("ok".into(), Input::Int(1)),
            ("v".into(), Input::List(vec![])),
            ("bad-key".into(), Input::Int(1)),
        ]);
        assert!(metadata_err(i).contains("value for key \"v\""));
        let i = Input::Map(vec![
            ("bad-key".into(), Input::Int(1)),
            ("v".into(), Input::List(vec![])),
        ]);
        assert!(metadata_err(i).contains("key \"bad-key\""));
    }

    #[test]
    fn metadata_filter_ands_exact_equalities() {
        let f = Filter::metadata(&input(json!({"a": 1, "b": "x"})))
            .unwrap()
            .unwrap();
        assert!(f.matches(&record(json!({"a": 1.0, "b": "x", "c": 3}))));
        assert!(!f.matches(&record(json!({"a": 1}))));
        assert!(!f.matches(&record(json!({"a": "1", "b": "x"}))));
        assert!(!f.matches(&Record::new()));
    }

    #[test]
    fn input_from_json_text() {
        assert_eq!(
            Input::from_json(r#"{"a": [1, 2.5, null]}"#).unwrap(),
            Input::Map(vec![(
                "a".into(),
                Input::List(vec![Input::Int(1), Input::Float(2.5), Input::Null])
            )])
        );
        assert!(matches!(
            Input::from_json("{"),
            Err(CoreError::InvalidFilter(_))
        ));
    }

    // ---- property test: `matches` against a naive evaluator written independently ----

    const KEYS: [&str; 4] = ["a", "b", "c", "d"];

    fn arb_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..4).prop_map(Value::Int),
            prop_oneof![Just(-1.5), Just(0.0), Just(1.0), Just(2.0), Just(2.5)]
                .prop_map(Value::Float),
            prop_oneof![Just("x"), Just("y"), Just("2024-01-01"), Just("")]
                .prop_map(|s| Value::Str(s.into())),
            Just(Value::Other),
        ]
    }

    fn arb_operand() -> impl Strategy<Value = Value> {
        arb_value().prop_filter("operands are scalars", |v| *v != Value::Other)
    }

    fn arb_key() -> impl Strategy<Value = &'static str> {
        prop::sample::select(&KEYS[..])
    }

    fn arb_record() -> impl Strategy<Value = Record> {
        prop::collection::vec((arb_key(), arb_value()), 0..4)
            .prop_map(|entries| entries.into_iter().collect())
    }

    /// A filter as JSON-like input, in the vector dialect.
    fn arb_filter_input() -> impl Strategy<Value = Input> {
        let leaf = (
            arb_key(),
            0..10usize,
            arb_operand(),
            prop::collection::vec(arb_operand(), 0..3),
        )
            .prop_map(|(key, op, v, vs)| {
                let scalar = value_input(&v);
                let list = Input::List(vs.iter().map(value_input).collect());
                let cond = match op {
                    0 => scalar,
                    1 => op_map("$eq", scalar),
                    2 => op_map("$ne", scalar),
                    3 => op_map("$gt", orderable_input(&v)),
                    4 => op_map("$gte", orderable_input(&v)),
                    5 => op_map("$lt", orderable_input(&v)),
                    6 => op_map("$lte", orderable_input(&v)),
                    7 => op_map("$in", list),
                    8 => op_map("$nin", list),
                    _ => op_map("$exists", Input::Bool(vs.len() % 2 == 0)),
                };
                Input::Map(vec![(key.to_string(), cond)])
            });
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 1..3)
                    .prop_map(|fs| Input::Map(vec![("$and".into(), Input::List(fs))])),
                prop::collection::vec(inner.clone(), 1..3)
                    .prop_map(|fs| Input::Map(vec![("$or".into(), Input::List(fs))])),
                inner
                    .clone()
                    .prop_map(|f| Input::Map(vec![("$not".into(), f)])),
                prop::collection::vec(inner, 1..3).prop_map(|fs| {
                    // Several entries in one map AND; merging keeps the first of a duplicate.
                    let mut entries: Vec<(String, Input)> = Vec::new();
                    for f in fs {
                        if let Input::Map(es) = f {
                            for (k, v) in es {
                                if !entries.iter().any(|(e, _)| *e == k) {
                                    entries.push((k, v));
                                }
                            }
                        }
                    }
                    Input::Map(entries)
                }),
            ]
        })
    }

    fn value_input(v: &Value) -> Input {
        match v {
            Value::Null => Input::Null,
            Value::Bool(b) => Input::Bool(*b),
            Value::Int(i) => Input::Int(*i),
            Value::Float(f) => Input::Float(*f),
            Value::Str(s) => Input::Str(s.to_string()),
            Value::Other => Input::List(vec![]),
        }
    }

    fn orderable_input(v: &Value) -> Input {
        match v {
            Value::Int(_) | Value::Float(_) | Value::Str(_) => value_input(v),
            _ => Input::Int(1),
        }
    }

    fn op_map(op: &str, v: Input) -> Input {
        Input::Map(vec![(op.into(), v)])
    }

    /// Naive evaluation straight from the input tree, sharing no code with `Filter::matches`.
    fn naive(filter: &Input, r: &Record) -> bool {
        let Input::Map(entries) = filter else {
            unreachable!()
        };
        entries.iter().all(|(k, v)| match (k.as_str(), v) {
            ("$and", Input::List(fs)) => fs.iter().all(|f| naive(f, r)),
            ("$or", Input::List(fs)) => fs.iter().any(|f| naive(f, r)),
            ("$not", f) => !naive(f, r),
            (field, Input::Map(ops)) => ops.iter().all(|(op, x)| naive_op(r.get(field), op, x)),
            (field, x) => naive_op(r.get(field), "$eq", x),
        })
    }

    fn as_f64(v: &Value) -> Option<f64> {
        match v {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    fn naive_eq(s: &Value, x: &Input) -> bool {
        match (s, x) {
            (Value::Null, Input::Null) => true,
            (Value::Bool(a), Input::Bool(b)) => a == b,
            (Value::Str(a), Input::Str(b)) => **a == *b,
            (Value::Int(_) | Value::Float(_), Input::Int(_) | Input::Float(_)) => {
                as_f64(s) == as_f64(&Value::from_input(x.clone()))
            }
            _ => false,
        }
    }

    fn naive_cmp(s: &Value, x: &Input) -> Option<Ordering> {
        match (s, x) {
            (Value::Str(a), Input::Str(b)) => Some((**a).cmp(b.as_str())),
            (Value::Int(_) | Value::Float(_), Input::Int(_) | Input::Float(_)) => {
                as_f64(s)?.partial_cmp(&as_f64(&Value::from_input(x.clone()))?)
            }
            _ => None,
        }
    }

    fn naive_op(s: Option<&Value>, op: &str, x: &Input) -> bool {
        let list = |x: &Input| match x {
            Input::List(items) => items.clone(),
            _ => unreachable!(),
        };
        match op {
            "$eq" => s.is_some_and(|s| naive_eq(s, x)),
            "$ne" => !s.is_some_and(|s| naive_eq(s, x)),
            "$gt" => s.and_then(|s| naive_cmp(s, x)) == Some(Ordering::Greater),
            "$gte" => matches!(
                s.and_then(|s| naive_cmp(s, x)),
                Some(Ordering::Greater | Ordering::Equal)
            ),
            "$lt" => s.and_then(|s| naive_cmp(s, x)) == Some(Ordering::Less),
            "$lte" => matches!(
                s.and_then(|s| naive_cmp(s, x)),
                Some(Ordering::Less | Ordering::Equal)
            ),
            "$in" => s.is_some_and(|s| list(x).iter().any(|i| naive_eq(s, i))),
            "$nin" => !s.is_some_and(|s| list(x).iter().any(|i| naive_eq(s, i))),
            "$exists" => s.is_some() == (*x == Input::Bool(true)),
            "$not" => !match x {
                Input::Map(ops) => ops.iter().all(|(op, y)| naive_op(s, op, y)),
                _ => unreachable!(),
            },
            _ => unreachable!(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, rng_seed: proptest::test_runner::RngSeed::Fixed(0x7e11), ..ProptestConfig::default() })]

        #[test]
        fn matches_agrees_with_naive_evaluator(f in arb_filter_input(), records in prop::collection::vec(arb_record(), 1..6)) {
            let parsed = Filter::vector(&f).unwrap().unwrap_or(Filter::All);
            for r in &records {
                prop_assert_eq!(parsed.matches(r), naive(&f, r), "filter {:?} record {:?}", f, r);
            }
        }

        #[test]
        fn metadata_filter_agrees_with_naive_evaluator(
            terms in prop::collection::vec((arb_key(), arb_operand()), 0..4),
            records in prop::collection::vec(arb_record(), 1..6),
        ) {
            let mut entries: Vec<(String, Input)> = Vec::new();
            for (k, v) in &terms {
                if !entries.iter().any(|(e, _)| e == k) {
                    entries.push((k.to_string(), value_input(v)));
                }
            }
            let input = Input::Map(entries.clone());
            let parsed = Filter::metadata(&input).unwrap();
            prop_assert_eq!(parsed.is_none(), entries.is_empty());
            for r in &records {
                let expected = entries.iter().all(|(k, v)| r.get(k).is_some_and(|s| naive_eq(s, v)));
                prop_assert_eq!(parsed.as_ref().is_none_or(|f| f.matches(r)), expected);
            }
        }
    }
}
