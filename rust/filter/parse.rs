//! Parsing and validation of both filter dialects (see the module above for their rules)
//! into one [`Filter`] tree.

use super::{Filter, Value};
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
    use serde_json::json;

    fn input(v: serde_json::Value) -> Input {
        Input::from(&v)
    }

    fn record(v: serde_json::Value) -> crate::filter::Record {
        crate::filter::Record::from_input(input(v))
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
        assert!(!f.matches(&crate::filter::Record::new()));
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
}
