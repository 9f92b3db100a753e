//! Python values into core inputs and records, and back out as JSON text.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::error::CoreError;
use crate::filter::{Input, Record, Value, MAX_DEPTH};
use crate::json;

/// Converts any Python object into a filter input tree. Booleans are checked before ints;
/// ints beyond i64 become floats; NaN and infinities are kept so the parser can reject them.
/// A lone surrogate in a string becomes U+FFFD.
pub(crate) fn input_from_py(obj: &Bound<'_, PyAny>) -> PyResult<Input> {
    input_at_depth(obj, 0, false)
}

/// [`input_from_py`], refusing a string that holds a lone surrogate (`InvalidArgument`).
pub(crate) fn strict_input_from_py(obj: &Bound<'_, PyAny>) -> PyResult<Input> {
    input_at_depth(obj, 0, true)
}

fn input_at_depth(obj: &Bound<'_, PyAny>, depth: usize, strict: bool) -> PyResult<Input> {
    if depth > 2 * MAX_DEPTH + 2 {
        return Ok(Input::Unsupported("too deeply nested value".into()));
    }
    let text = |s: &Bound<'_, PyString>| {
        if strict {
            strict_text(s)
        } else {
            Ok(s.to_string_lossy().into_owned())
        }
    };
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Input::Str(text(s)?));
    }
    if let Some(scalar) = scalar_input(obj)? {
        return Ok(scalar);
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        let mut entries = Vec::with_capacity(dict.len());
        for (key, value) in dict.iter() {
            let Ok(key) = key.cast::<PyString>() else {
                let kind = key.get_type().name()?;
                return Err(CoreError::InvalidFilter(format!(
                    "filter keys must be strings, not {kind}"
                ))
                .into());
            };
            entries.push((text(key)?, input_at_depth(&value, depth + 1, strict)?));
        }
        return Ok(Input::Map(entries));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let items = obj.try_iter()?;
        return Ok(Input::List(
            items
                .map(|item| input_at_depth(&item?, depth + 1, strict))
                .collect::<PyResult<_>>()?,
        ));
    }
    Ok(Input::Unsupported(obj.get_type().name()?.to_string()))
}

/// The text of a string, or `InvalidArgument` for a lone surrogate (which UTF-8 cannot store,
/// so neither a stored value nor a filter can hold one).
fn strict_text(s: &Bound<'_, PyString>) -> PyResult<String> {
    match s.to_str() {
        Ok(text) => Ok(text.to_owned()),
        Err(_) => Err(CoreError::InvalidArgument(format!(
            "the string {} holds a lone surrogate, which UTF-8 cannot store",
            s.repr()?
        ))
        .into()),
    }
}

/// None, bool, int, float or str as an input leaf; `None` for anything else.
pub(crate) fn scalar_input(obj: &Bound<'_, PyAny>) -> PyResult<Option<Input>> {
    Ok(Some(if obj.is_none() {
        Input::Null
    } else if let Ok(b) = obj.cast::<PyBool>() {
        Input::Bool(b.is_true())
    } else if let Ok(i) = obj.cast::<PyInt>() {
        match i.extract::<i64>() {
            Ok(v) => Input::Int(v),
            Err(_) => Input::Float(i.extract::<f64>().unwrap_or(if i.lt(0)? {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            })),
        }
    } else if let Ok(f) = obj.cast::<PyFloat>() {
        Input::Float(f.value())
    } else if let Ok(s) = obj.cast::<PyString>() {
        Input::Str(s.to_string_lossy().into_owned())
    } else {
        return Ok(None);
    }))
}

/// Shallow message metadata as a record: scalars kept, anything else stored as `Other`.
pub(crate) fn record_from_py(obj: &Bound<'_, PyAny>) -> PyResult<Record> {
    if obj.is_none() {
        return Ok(Record::new());
    }
    let dict = obj.cast::<PyDict>().map_err(|_| {
        CoreError::InvalidArgument("message metadata must be a dict or None".into())
    })?;
    let mut record = Record::new();
    for (key, value) in dict.iter() {
        let key = key.cast::<PyString>().map_err(|_| {
            CoreError::InvalidArgument("message metadata keys must be strings".into())
        })?;
        let value = scalar_input(&value)?.map_or(Value::Other, Value::from_input);
        record.set(&key.to_string_lossy(), value);
    }
    Ok(record)
}

/// Nesting beyond which `compact_json` leaves a value to Python (whose encoder reports cycles).
const MAX_JSON_DEPTH: usize = 64;

/// `value` as the compact JSON text Python's `json` writes (`separators=(",", ":")`,
/// `ensure_ascii=False`); `None` for what only Python's encoder knows how to handle: other
/// types, subclasses of dict, list and tuple, non-string keys, integers beyond 64 bits,
/// unpaired surrogates, deep nesting.
#[pyfunction]
pub fn compact_json(value: &Bound<'_, PyAny>) -> Option<String> {
    let mut out = String::new();
    write_json(&mut out, value, 0).then_some(out)
}

pub(crate) fn write_json(out: &mut String, value: &Bound<'_, PyAny>, depth: usize) -> bool {
    if value.is_none() {
        out.push_str("null");
    } else if let Ok(flag) = value.cast::<PyBool>() {
        out.push_str(if flag.is_true() { "true" } else { "false" });
    } else if let Ok(int) = value.cast::<PyInt>() {
        let Ok(int) = int.extract::<i64>() else {
            return false;
        };
        out.push_str(&int.to_string());
    } else if let Ok(float) = value.cast::<PyFloat>() {
        json::write_f64(out, float.value());
    } else if let Ok(text) = value.cast::<PyString>() {
        let Ok(text) = text.to_str() else {
            return false;
        };
        json::write_str(out, text);
    } else if depth == MAX_JSON_DEPTH {
        return false;
    } else if let Ok(dict) = value.cast_exact::<PyDict>() {
        out.push('{');
        for (n, (key, item)) in dict.iter().enumerate() {
            let Some(key) = key.cast::<PyString>().ok().and_then(|k| k.to_str().ok()) else {
                return false;
            };
            if n > 0 {
                out.push(',');
            }
            json::write_str(out, key);
            out.push(':');
            if !write_json(out, &item, depth + 1) {
                return false;
            }
        }
        out.push('}');
    } else if value.is_exact_instance_of::<PyList>() || value.is_exact_instance_of::<PyTuple>() {
        out.push('[');
        let Ok(items) = value.try_iter() else {
            return false;
        };
        for (n, item) in items.enumerate() {
            if n > 0 {
                out.push(',');
            }
            if !item.is_ok_and(|item| write_json(out, &item, depth + 1)) {
                return false;
            }
        }
        out.push(']');
    } else {
        return false;
    }
    true
}

/// Parses JSON metadata texts without the GIL.
pub(crate) fn inputs_from_json(py: Python<'_>, texts: &[String]) -> PyResult<Vec<Input>> {
    Ok(py.detach(|| {
        texts
            .iter()
            .map(|t| Input::from_json(t))
            .collect::<crate::Result<Vec<_>>>()
            .map_err(|_| {
                CoreError::InvalidArgument("metadata_json holds a text that is not JSON".into())
            })
    })?)
}

pub(crate) fn one_metadata_form() -> PyErr {
    CoreError::InvalidArgument("give exactly one of metadata and metadata_json".into()).into()
}
