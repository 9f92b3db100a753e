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
mod record;

use std::cmp::Ordering;

pub use parse::{Input, MAX_DEPTH};
pub use record::{Fields, Record, Scalar, Value};

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
