//! The Python binding: thin wrappers over the core, numpy in and out, one error mapping.

mod convert;
mod error;
mod lexical;
mod objects;
mod rows;
mod timeline;
mod vector;

use pyo3::prelude::*;

use crate::filter::Filter;
use convert::{compact_json, input_from_py, record_from_py};
use lexical::PyLexicalIndex;
use timeline::PyTimeline;
use vector::PyVectorIndex;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(compact_json, m)?)?;
    m.add_function(wrap_pyfunction!(rows::stored_messages, m)?)?;
    m.add_function(wrap_pyfunction!(validate_metadata_filter, m)?)?;
    m.add_function(wrap_pyfunction!(validate_vector_filter, m)?)?;
    m.add_function(wrap_pyfunction!(matches_metadata_filter, m)?)?;
    m.add_function(wrap_pyfunction!(matches_vector_filter, m)?)?;
    m.add_class::<PyTimeline>()?;
    m.add_class::<PyVectorIndex>()?;
    m.add_class::<PyLexicalIndex>()?;
    Ok(())
}

// ---- filters ----

/// Checks recall's `filter.metadata`; raises InvalidFilterError or FilterTypeError.
#[pyfunction]
fn validate_metadata_filter(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    Filter::metadata(&input_from_py(obj)?)?;
    Ok(())
}

/// Checks a Mongo-style vector filter; raises InvalidFilterError or FilterTypeError.
#[pyfunction]
fn validate_vector_filter(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    Filter::vector(&input_from_py(obj)?)?;
    Ok(())
}

/// For each metadata dict (or None), whether it passes the vector filter.
#[pyfunction]
fn matches_vector_filter(
    py: Python<'_>,
    filter: &Bound<'_, PyAny>,
    records: Vec<Bound<'_, PyAny>>,
) -> PyResult<Vec<bool>> {
    let filter = Filter::vector(&input_from_py(filter)?)?;
    evaluate(py, filter, &records)
}

/// For each metadata dict (or None), whether it passes recall's metadata filter.
#[pyfunction]
fn matches_metadata_filter(
    py: Python<'_>,
    filter: &Bound<'_, PyAny>,
    records: Vec<Bound<'_, PyAny>>,
) -> PyResult<Vec<bool>> {
    let filter = Filter::metadata(&input_from_py(filter)?)?;
    evaluate(py, filter, &records)
}

fn evaluate(
    py: Python<'_>,
    filter: Option<Filter>,
    records: &[Bound<'_, PyAny>],
) -> PyResult<Vec<bool>> {
    let records = records
        .iter()
        .map(record_from_py)
        .collect::<PyResult<Vec<_>>>()?;
    Ok(py.detach(|| {
        records
            .iter()
            .map(|r| filter.as_ref().is_none_or(|f| f.matches(r)))
            .collect()
    }))
}
