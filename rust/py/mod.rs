//! The Python binding: thin wrappers over the core, numpy in and out, one error mapping.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock};

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::error::CoreError;
use crate::filter::{Filter, Input, Record, Value, MAX_DEPTH};
use crate::json;
use crate::timeline::{
    best_first, Bound as TimeBound, Fusion, Include, PageQuery, Row, RowRef, Timeline,
};

pyo3::import_exception!(threadrecall.errors, InvalidFilterError);
pyo3::import_exception!(threadrecall.errors, FilterTypeError);
pyo3::import_exception!(threadrecall.errors, DimensionMismatchError);
pyo3::import_exception!(threadrecall.errors, IndexCorruptError);
pyo3::import_exception!(threadrecall.errors, InvalidArgumentError);
pyo3::import_exception!(threadrecall.errors, StorageError);

impl From<CoreError> for PyErr {
    fn from(err: CoreError) -> PyErr {
        let text = err.to_string();
        match err {
            CoreError::InvalidFilter(_) => InvalidFilterError::new_err(text),
            CoreError::FilterType(_) => FilterTypeError::new_err(text),
            CoreError::DimensionMismatch { .. } => DimensionMismatchError::new_err(text),
            CoreError::IndexCorrupt(_) => IndexCorruptError::new_err(text),
            CoreError::InvalidArgument(_) => InvalidArgumentError::new_err(text),
            CoreError::Io(_) => StorageError::new_err(text),
        }
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(compact_json, m)?)?;
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

/// Converts any Python object into a filter input tree. Booleans are checked before ints;
/// ints beyond i64 become floats; NaN and infinities are kept so the parser can reject them.
pub(crate) fn input_from_py(obj: &Bound<'_, PyAny>) -> PyResult<Input> {
    input_at_depth(obj, 0)
}

fn input_at_depth(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Input> {
    if depth > 2 * MAX_DEPTH + 2 {
        return Ok(Input::Unsupported("too deeply nested value".into()));
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
            entries.push((
                key.to_string_lossy().into_owned(),
                input_at_depth(&value, depth + 1)?,
            ));
        }
        return Ok(Input::Map(entries));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let items = obj.try_iter()?;
        return Ok(Input::List(
            items
                .map(|item| input_at_depth(&item?, depth + 1))
                .collect::<PyResult<_>>()?,
        ));
    }
    Ok(Input::Unsupported(obj.get_type().name()?.to_string()))
}

/// None, bool, int, float or str as an input leaf; `None` for anything else.
fn scalar_input(obj: &Bound<'_, PyAny>) -> PyResult<Option<Input>> {
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
fn record_from_py(obj: &Bound<'_, PyAny>) -> PyResult<Record> {
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
fn compact_json(value: &Bound<'_, PyAny>) -> Option<String> {
    let mut out = String::new();
    write_json(&mut out, value, 0).then_some(out)
}

fn write_json(out: &mut String, value: &Bound<'_, PyAny>, depth: usize) -> bool {
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
fn inputs_from_json(py: Python<'_>, texts: &[String]) -> PyResult<Vec<Input>> {
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

fn one_metadata_form() -> PyErr {
    CoreError::InvalidArgument("give exactly one of metadata and metadata_json".into()).into()
}

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

// ---- timeline ----

/// A message as Python sees it: (id, thread_id, resource_id, created_at_us, seq, payload).
type RowTuple = (String, String, Option<String>, i64, u64, String);

fn row_tuple(row: RowRef<'_>) -> RowTuple {
    (
        row.id.to_owned(),
        row.thread_id.to_owned(),
        row.resource_id.map(str::to_owned),
        row.created_at,
        row.seq,
        row.payload.to_owned(),
    )
}

fn non_negative(name: &str, value: i64) -> PyResult<usize> {
    usize::try_from(value)
        .map_err(|_| CoreError::InvalidArgument(format!("{name} must be >= 0")).into())
}

/// The in-memory message timeline; safe to share between Python threads.
#[pyclass(name = "Timeline", module = "threadrecall._core", frozen)]
struct PyTimeline {
    inner: RwLock<Timeline>,
}

impl PyTimeline {
    fn read<T>(&self, py: Python<'_>, f: impl FnOnce(&Timeline) -> T + Send) -> T
    where
        T: Send,
    {
        py.detach(|| f(&self.inner.read().unwrap_or_else(PoisonError::into_inner)))
    }

    fn write<T>(&self, py: Python<'_>, f: impl FnOnce(&mut Timeline) -> T + Send) -> T
    where
        T: Send,
    {
        py.detach(|| f(&mut self.inner.write().unwrap_or_else(PoisonError::into_inner)))
    }
}

#[pymethods]
impl PyTimeline {
    #[new]
    fn new() -> Self {
        PyTimeline {
            inner: RwLock::new(Timeline::new()),
        }
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.read(py, Timeline::len)
    }

    /// Inserts or replaces messages by id; all lists must have the same length. Metadata as
    /// dicts (or None), or as JSON texts in `metadata_json` (parsed without the GIL).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (ids, thread_ids, resource_ids, created_at, seqs, metadata, payloads, *, metadata_json=None))]
    fn upsert(
        &self,
        py: Python<'_>,
        ids: Vec<String>,
        mut thread_ids: Vec<String>,
        mut resource_ids: Vec<Option<String>>,
        created_at: Vec<i64>,
        seqs: Vec<i64>,
        metadata: Option<Vec<Bound<'_, PyAny>>>,
        mut payloads: Vec<String>,
        metadata_json: Option<Vec<String>>,
    ) -> PyResult<()> {
        let n = ids.len();
        let mut records: Vec<Record> = match (metadata, metadata_json) {
            (Some(dicts), None) => dicts.iter().map(record_from_py).collect::<PyResult<_>>()?,
            (None, Some(texts)) => inputs_from_json(py, &texts)?
                .into_iter()
                .map(Record::from_input)
                .collect(),
            _ => return Err(one_metadata_form()),
        };
        let lengths = [
            thread_ids.len(),
            resource_ids.len(),
            created_at.len(),
            seqs.len(),
            records.len(),
            payloads.len(),
        ];
        if lengths.iter().any(|&len| len != n) {
            let text = "upsert lists must all have the same length";
            return Err(CoreError::InvalidArgument(text.into()).into());
        }
        let mut rows = Vec::with_capacity(n);
        for (i, id) in ids.into_iter().enumerate() {
            rows.push(Row {
                id,
                thread_id: std::mem::take(&mut thread_ids[i]),
                resource_id: resource_ids[i].take(),
                created_at: created_at[i],
                seq: non_negative("seq", seqs[i])? as u64,
                metadata: std::mem::take(&mut records[i]),
                payload: std::mem::take(&mut payloads[i]).into(),
            });
        }
        self.write(py, |t| t.upsert(rows));
        Ok(())
    }

    /// Removes messages by id; returns how many were present.
    fn remove(&self, py: Python<'_>, ids: Vec<String>) -> usize {
        self.write(py, |t| {
            t.remove(&ids.iter().map(String::as_str).collect::<Vec<_>>())
        })
    }

    /// Removes every message of a thread; returns how many there were.
    fn remove_thread(&self, py: Python<'_>, thread_id: &str) -> usize {
        self.write(py, |t| t.remove_thread(thread_id))
    }

    /// The message with this id as a row tuple, or None.
    fn get(&self, py: Python<'_>, id: &str) -> Option<RowTuple> {
        self.read(py, |t| t.get(id).map(row_tuple))
    }

    /// One page of a thread's messages and the count of all that pass the filters.
    #[pyo3(signature = (thread_id, *, resource_id=None, start=None, start_exclusive=false,
        end=None, end_exclusive=false, metadata=None, descending=false, offset=0, limit=None,
        after_id=None, before_id=None))]
    #[allow(clippy::too_many_arguments)]
    fn page(
        &self,
        py: Python<'_>,
        thread_id: &str,
        resource_id: Option<&str>,
        start: Option<i64>,
        start_exclusive: bool,
        end: Option<i64>,
        end_exclusive: bool,
        metadata: Option<&Bound<'_, PyAny>>,
        descending: bool,
        offset: i64,
        limit: Option<i64>,
        after_id: Option<&str>,
        before_id: Option<&str>,
    ) -> PyResult<(Vec<RowTuple>, usize)> {
        let filter = match metadata {
            Some(obj) => Filter::metadata(&input_from_py(obj)?)?,
            None => None,
        };
        let query = PageQuery {
            thread_id,
            resource_id,
            start: start.map(|at| TimeBound {
                at,
                exclusive: start_exclusive,
            }),
            end: end.map(|at| TimeBound {
                at,
                exclusive: end_exclusive,
            }),
            metadata: filter.as_ref(),
            descending,
            offset: non_negative("offset", offset)?,
            limit: limit.map(|l| non_negative("limit", l)).transpose()?,
            after_id,
            before_id,
        };
        let (rows, total) = self.read(py, |t| {
            t.page(&query)
                .map(|(rows, total)| (rows.into_iter().map(row_tuple).collect(), total))
        })?;
        Ok((rows, total))
    }

    /// Each (id, before, after) include's message and neighbours from its own thread,
    /// de-duplicated, in chronological order.
    #[pyo3(signature = (includes, resource_id=None))]
    fn window(
        &self,
        py: Python<'_>,
        includes: Vec<(String, i64, i64)>,
        resource_id: Option<&str>,
    ) -> PyResult<Vec<RowTuple>> {
        let includes = includes
            .iter()
            .map(|(id, before, after)| {
                Ok(Include {
                    id,
                    before: non_negative("before", *before)?,
                    after: non_negative("after", *after)?,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(self.read(py, |t| {
            t.window(&includes, resource_id)
                .into_iter()
                .map(row_tuple)
                .collect()
        }))
    }

    /// Each scored message's score plus `weight` times its best direct neighbour's, and the
    /// same for its unscored neighbours (only those in `entrants`, when given); best first,
    /// ties in the order given, then in the order the neighbours were met.
    #[pyo3(signature = (scores, weight, resource_id=None, entrants=None))]
    fn smooth<'py>(
        &self,
        py: Python<'py>,
        scores: Vec<(Bound<'py, PyString>, f64)>,
        weight: f64,
        resource_id: Option<&str>,
        entrants: Option<Vec<String>>,
    ) -> PyResult<Vec<(Bound<'py, PyString>, f64)>> {
        let pairs: Vec<(&str, f64)> = scores
            .iter()
            .map(|(id, s)| Ok((id.to_str()?, *s)))
            .collect::<PyResult<_>>()?;
        let entrants: Option<HashSet<&str>> = entrants
            .as_ref()
            .map(|e| e.iter().map(String::as_str).collect());
        // The scored ids come back first, in order: only their scores need carrying back, and
        // the caller's strings are reused; the neighbours met are new.
        let n = pairs.len();
        let (smoothed, met): (Vec<f64>, Vec<(String, f64)>) = self.read(py, |t| {
            let out = t.smooth(&pairs, resource_id, weight, entrants.as_ref());
            let met = out[n..].iter().map(|&(id, s)| (id.to_owned(), s)).collect();
            (out[..n].iter().map(|&(_, s)| s).collect(), met)
        });
        let met = met.into_iter().map(|(id, s)| (PyString::new(py, &id), s));
        Ok(best_first(
            scores
                .into_iter()
                .zip(smoothed)
                .map(|((id, _), s)| (id, s))
                .chain(met)
                .collect(),
        ))
    }

    /// Hybrid ranking of `lexical` and `vector` (each `(id, score)`, best first): see the
    /// core's `Timeline::fuse`. Returns the best `limit` (default all) `(id, score)`.
    #[pyo3(signature = (lexical, vector, side_weight, lexical_weight, rrf_k, final_weight, resource_id=None, entrants=None, limit=None))]
    #[allow(clippy::too_many_arguments)]
    fn fuse(
        &self,
        py: Python<'_>,
        lexical: Vec<(String, f64)>,
        vector: Vec<(String, f64)>,
        side_weight: f64,
        lexical_weight: f64,
        rrf_k: f64,
        final_weight: f64,
        resource_id: Option<&str>,
        entrants: Option<Vec<String>>,
        limit: Option<usize>,
    ) -> Vec<(String, f64)> {
        fn borrowed(side: &[(String, f64)]) -> Vec<(&str, f64)> {
            side.iter().map(|(id, s)| (id.as_str(), *s)).collect()
        }
        let (lexical, vector) = (borrowed(&lexical), borrowed(&vector));
        let entrants: Option<HashSet<&str>> = entrants
            .as_ref()
            .map(|e| e.iter().map(String::as_str).collect());
        let fusion = Fusion {
            side_weight,
            lexical_weight,
            rrf_k,
            final_weight,
        };
        self.read(py, |t| {
            let ranked = t.fuse(&lexical, &vector, resource_id, entrants.as_ref(), &fusion);
            ranked
                .into_iter()
                .take(limit.unwrap_or(usize::MAX))
                .map(|(id, s)| (id.to_owned(), s))
                .collect()
        })
    }

    /// For each id, the ids of the messages right before and after it in its thread.
    #[pyo3(signature = (ids, resource_id=None))]
    fn adjacent(
        &self,
        py: Python<'_>,
        ids: Vec<String>,
        resource_id: Option<&str>,
    ) -> Vec<(Option<String>, Option<String>)> {
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        self.read(py, |t| {
            t.adjacent(&ids, resource_id)
                .into_iter()
                .map(|(a, b)| (a.map(str::to_owned), b.map(str::to_owned)))
                .collect()
        })
    }
}

// ---- vector index ----

use std::path::PathBuf;

use numpy::{PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};

use crate::distance::Metric;
use crate::vector::graph::Linked;
use crate::vector::persist;
use crate::vector::{Hit, VectorIndex};

fn vector_filter(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Filter>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => Ok(Filter::vector(&input_from_py(o)?)?),
    }
}

fn count(name: &str, value: i64) -> PyResult<usize> {
    usize::try_from(value).map_err(|_| {
        CoreError::InvalidArgument(format!(
            "{name} must be a non-negative integer, got {value}"
        ))
        .into()
    })
}

fn contiguous<'a>(arr: &'a PyReadonlyArray2<'_, f32>) -> PyResult<&'a [f32]> {
    arr.as_slice().map_err(|_| {
        CoreError::InvalidArgument("vectors must be a C-contiguous float32 array".into()).into()
    })
}

fn pairs(hits: Vec<Hit>) -> Vec<(String, f32)> {
    hits.into_iter().map(|h| (h.id, h.score)).collect()
}

/// An HNSW vector index with filter pushdown; many readers, one writer.
#[pyclass(name = "VectorIndex", module = "threadrecall._core", frozen)]
struct PyVectorIndex {
    inner: RwLock<VectorIndex>,
    /// Writers waiting for the lock: linking steps aside for them between vectors.
    writers: AtomicUsize,
}

impl PyVectorIndex {
    fn read<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&VectorIndex) -> T + Send) -> T {
        py.detach(|| f(&self.inner.read().unwrap_or_else(PoisonError::into_inner)))
    }

    fn write<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut VectorIndex) -> T + Send) -> T {
        py.detach(|| {
            self.writers.fetch_add(1, Ordering::SeqCst);
            let mut index = self.inner.write().unwrap_or_else(PoisonError::into_inner);
            self.writers.fetch_sub(1, Ordering::SeqCst);
            f(&mut index)
        })
    }
}

#[pymethods]
impl PyVectorIndex {
    #[new]
    #[pyo3(signature = (dim, metric="cosine", m=16, ef_construction=200, seed=0))]
    fn new(dim: i64, metric: &str, m: i64, ef_construction: i64, seed: u64) -> PyResult<Self> {
        let index = VectorIndex::new(
            count("dim", dim)?,
            Metric::parse(metric)?,
            count("m", m)?,
            count("ef_construction", ef_construction)?,
            seed,
        )?;
        Ok(PyVectorIndex {
            inner: RwLock::new(index),
            writers: AtomicUsize::new(0),
        })
    }

    /// Inserts or replaces vectors by id; `vectors` is float32 `(len(ids), dim)`; metadata
    /// as dicts, or as JSON texts in `metadata_json` (parsed without the GIL). They are
    /// searchable at once; with `link=False` they wait for `link_pending` to join the graph,
    /// with `link=True` the graph links them (and any earlier backlog) before returning.
    #[pyo3(signature = (ids, vectors, metadata=None, *, metadata_json=None, link=false))]
    fn add(
        &self,
        py: Python<'_>,
        ids: Vec<String>,
        vectors: PyReadonlyArray2<'_, f32>,
        metadata: Option<Vec<Bound<'_, PyAny>>>,
        metadata_json: Option<Vec<String>>,
        link: bool,
    ) -> PyResult<()> {
        let (rows, cols) = (vectors.shape()[0], vectors.shape()[1]);
        let dim = self.read(py, |ix| ix.dim());
        if cols != dim && rows > 0 {
            return Err(CoreError::DimensionMismatch {
                expected: dim,
                got: cols,
            }
            .into());
        }
        if rows != ids.len() {
            let text = format!("{} ids but {rows} vectors", ids.len());
            return Err(CoreError::InvalidArgument(text).into());
        }
        let flat = contiguous(&vectors)?;
        let metadata = match (metadata, metadata_json) {
            (Some(dicts), None) => dicts
                .iter()
                .map(input_from_py)
                .collect::<PyResult<Vec<_>>>()?,
            (None, Some(texts)) => inputs_from_json(py, &texts)?,
            _ => return Err(one_metadata_form()),
        };
        Ok(self.write(py, |ix| {
            ix.add(ids, flat, metadata)?;
            if link {
                ix.link_pending(usize::MAX);
            }
            Ok::<_, CoreError>(())
        })?)
    }

    /// Links up to `max_count` (default: all) waiting vectors into the graph, oldest first;
    /// returns how many were linked. Each is planned under the read lock, beside searches,
    /// and written under the write lock, held only to copy a few link lists. A writer waiting
    /// for the index goes first, between two vectors, so linking never delays a write.
    #[pyo3(signature = (max_count=None))]
    fn link_pending(&self, py: Python<'_>, max_count: Option<i64>) -> PyResult<usize> {
        let max_count = max_count
            .map(|n| count("max_count", n))
            .transpose()?
            .unwrap_or(usize::MAX);
        let lock = &self.inner;
        Ok(py.detach(|| {
            let mut linked = 0;
            while linked < max_count {
                if self.writers.load(Ordering::SeqCst) > 0 {
                    std::thread::yield_now(); // until it holds the lock; then reads queue behind it
                    continue;
                }
                let plan = lock
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .plan_link();
                let Some(plan) = plan else { break };
                let mut ix = lock.write().unwrap_or_else(PoisonError::into_inner);
                if ix.apply_link(plan) == Linked::Yes {
                    linked += 1;
                }
            }
            linked
        }))
    }

    /// Links every waiting vector into the graph on `threads` threads, in batches: each is
    /// linked under the read lock, beside searches (which scan it exactly meanwhile), then
    /// taken off the queue under the write lock. Returns how many were linked.
    #[pyo3(signature = (threads, batch=8192))]
    fn link_all(&self, py: Python<'_>, threads: i64, batch: i64) -> PyResult<usize> {
        let (threads, batch) = (
            count("threads", threads)?.max(1),
            count("batch", batch)?.max(1),
        );
        let lock = &self.inner;
        Ok(py.detach(|| {
            let mut linked = lock
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .link_pending(1);
            loop {
                let done = lock
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .link_batch(batch, threads);
                if done.is_empty() {
                    return linked;
                }
                linked += done.len();
                lock.write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .finish_batch(&done);
            }
        }))
    }

    /// How many vectors wait to be linked into the graph.
    #[getter]
    fn pending(&self, py: Python<'_>) -> usize {
        self.read(py, |ix| ix.pending_len())
    }

    /// Deletes vectors by id; returns how many existed.
    fn remove(&self, py: Python<'_>, ids: Vec<String>) -> usize {
        self.write(py, |ix| ix.remove(&ids))
    }

    /// The ids of every vector whose metadata passes `filter`.
    fn ids_where(&self, py: Python<'_>, filter: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        Ok(match vector_filter(Some(filter))? {
            Some(filter) => self.read(py, |ix| ix.ids_where(&filter)),
            None => self.read(py, |ix| ix.ids()),
        })
    }

    /// Deletes every vector whose metadata passes `filter`; returns their ids.
    fn remove_where(&self, py: Python<'_>, filter: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let Some(filter) = vector_filter(Some(filter))? else {
            return Err(
                CoreError::InvalidFilter("remove_where needs a non-empty filter".into()).into(),
            );
        };
        Ok(self.write(py, |ix| ix.remove_where(&filter)))
    }

    /// The `k` closest `(id, score)` pairs, closest first (score: larger is closer).
    #[pyo3(signature = (vector, k, filter=None, ef=None))]
    fn search(
        &self,
        py: Python<'_>,
        vector: PyReadonlyArray1<'_, f32>,
        k: i64,
        filter: Option<&Bound<'_, PyAny>>,
        ef: Option<i64>,
    ) -> PyResult<Vec<(String, f32)>> {
        let k = count("k", k)?;
        let ef = ef.map(|e| count("ef", e)).transpose()?;
        let filter = vector_filter(filter)?;
        let q = vector.as_slice().map_err(|_| {
            CoreError::InvalidArgument("the query must be a contiguous float32 array".into())
        })?;
        Ok(pairs(
            self.read(py, |ix| ix.search(q, k, filter.as_ref(), ef))?,
        ))
    }

    /// [`search`] for each row of a float32 `(n, dim)` array, with one filter.
    #[pyo3(signature = (vectors, k, filter=None, ef=None))]
    fn search_batch(
        &self,
        py: Python<'_>,
        vectors: PyReadonlyArray2<'_, f32>,
        k: i64,
        filter: Option<&Bound<'_, PyAny>>,
        ef: Option<i64>,
    ) -> PyResult<Vec<Vec<(String, f32)>>> {
        let k = count("k", k)?;
        let ef = ef.map(|e| count("ef", e)).transpose()?;
        let filter = vector_filter(filter)?;
        let cols = vectors.shape()[1];
        let flat = contiguous(&vectors)?;
        let found = self.read(py, |ix| {
            if cols != ix.dim() {
                return Err(CoreError::DimensionMismatch {
                    expected: ix.dim(),
                    got: cols,
                });
            }
            flat.chunks_exact(cols.max(1))
                .map(|q| ix.search(q, k, filter.as_ref(), ef).map(pairs))
                .collect::<crate::Result<Vec<_>>>()
        })?;
        Ok(found)
    }

    /// The stored vector of `id` (unit length for cosine), or None.
    fn get_vector<'py>(&self, py: Python<'py>, id: &str) -> Option<Bound<'py, PyArray1<f32>>> {
        let v = self.read(py, |ix| ix.get_vector(id).map(<[f32]>::to_vec));
        v.map(|v| PyArray1::from_vec(py, v))
    }

    fn __contains__(&self, py: Python<'_>, id: &str) -> bool {
        self.read(py, |ix| ix.contains(id))
    }

    /// Writes the index atomically to `path`, tagged with the database `generation`.
    /// The index is held only while it is copied, not while the file is written. Returns how
    /// many vectors the file holds as waiting to be linked.
    fn save(&self, py: Python<'_>, path: PathBuf, generation: u64) -> PyResult<usize> {
        let (bytes, pending) =
            self.read(py, |ix| (persist::encode(ix, generation), ix.pending_len()));
        py.detach(|| persist::write(&path, &bytes))?;
        Ok(pending)
    }

    /// Reads an index file: returns `(index, generation)`; raises IndexCorruptError.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<(Self, u64)> {
        let (index, generation) = py.detach(|| persist::load(&path))?;
        Ok((
            PyVectorIndex {
                inner: RwLock::new(index),
                writers: AtomicUsize::new(0),
            },
            generation,
        ))
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.read(py, |ix| ix.len())
    }

    #[getter]
    fn dim(&self, py: Python<'_>) -> usize {
        self.read(py, |ix| ix.dim())
    }

    #[getter]
    fn metric(&self, py: Python<'_>) -> &'static str {
        self.read(py, |ix| ix.metric().name())
    }

    /// Estimated resident bytes: `{"vectors", "graph", "ids", "metadata"}`.
    fn memory_bytes(&self, py: Python<'_>) -> Vec<(&'static str, usize)> {
        let m = self.read(py, |ix| ix.memory_bytes());
        vec![
            ("vectors", m.vectors),
            ("codes", m.codes),
            ("graph", m.graph),
            ("ids", m.ids),
            ("metadata", m.metadata),
        ]
    }
}

// ---- lexical index ----

use crate::lexical::{LexicalIndex, Scope, Tokenizer};

/// BM25 over message text, searchable by thread or resource; safe to share between threads.
#[pyclass(name = "LexicalIndex", module = "threadrecall._core", frozen)]
struct PyLexicalIndex {
    inner: RwLock<LexicalIndex>,
}

impl PyLexicalIndex {
    fn read<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&LexicalIndex) -> T + Send) -> T {
        py.detach(|| f(&self.inner.read().unwrap_or_else(PoisonError::into_inner)))
    }

    fn write<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut LexicalIndex) -> T + Send) -> T {
        py.detach(|| f(&mut self.inner.write().unwrap_or_else(PoisonError::into_inner)))
    }
}

#[pymethods]
impl PyLexicalIndex {
    /// `k1 = 0.9, b = 0.2` (LoCoMo turns are short, so length matters little) and a context of
    /// the 3 turns before a message at weight 0.7 scored best of the settings tried on LoCoMo
    /// (1 turn gave less, 3 to 5 about the same); `context=0` scores each message on its own
    /// text only.
    #[new]
    #[pyo3(signature = (*, k1=0.9, b=0.2, stem=true, stop_words=true, context=0.7, context_turns=3))]
    fn new(
        k1: f32,
        b: f32,
        stem: bool,
        stop_words: bool,
        context: f32,
        context_turns: i64,
    ) -> PyResult<Self> {
        let context_turns = count("context_turns", context_turns)?;
        if !(k1.is_finite() && k1 >= 0.0 && (0.0..=1.0).contains(&b)) {
            let text = format!("BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}");
            return Err(CoreError::InvalidArgument(text).into());
        }
        if !(context.is_finite() && context >= 0.0) {
            let text = format!("context weight must be a finite number >= 0, got {context}");
            return Err(CoreError::InvalidArgument(text).into());
        }
        let tokenizer = Tokenizer { stem, stop_words };
        Ok(PyLexicalIndex {
            inner: RwLock::new(LexicalIndex::new(tokenizer, k1, b, context_turns, context)),
        })
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.read(py, LexicalIndex::len)
    }

    /// Inserts or replaces messages by id; all lists must have the same length. `orders`
    /// (e.g. creation times) place each message in its thread; without them, upsert order does.
    #[pyo3(signature = (ids, thread_ids, resource_ids, texts, orders=None))]
    fn upsert(
        &self,
        py: Python<'_>,
        ids: Vec<String>,
        thread_ids: Vec<String>,
        resource_ids: Vec<Option<String>>,
        texts: Vec<String>,
        orders: Option<Vec<i64>>,
    ) -> PyResult<()> {
        let n = ids.len();
        let orders_fit = orders.as_ref().is_none_or(|o| o.len() == n);
        if thread_ids.len() != n || resource_ids.len() != n || texts.len() != n || !orders_fit {
            let text = "upsert lists must all have the same length";
            return Err(CoreError::InvalidArgument(text.into()).into());
        }
        self.write(py, |ix| {
            for i in 0..n {
                ix.upsert(
                    &ids[i],
                    &thread_ids[i],
                    resource_ids[i].as_deref(),
                    orders.as_ref().map_or(0, |o| o[i]),
                    &texts[i],
                );
            }
        });
        Ok(())
    }

    /// Removes messages by id; returns how many were present.
    fn remove(&self, py: Python<'_>, ids: Vec<String>) -> usize {
        self.write(py, |ix| ix.remove(ids.iter().map(String::as_str)))
    }

    /// Removes every message of a thread; returns how many there were.
    fn remove_thread(&self, py: Python<'_>, thread_id: &str) -> usize {
        self.write(py, |ix| ix.remove_thread(thread_id))
    }

    /// The `k` best `(id, score)` pairs for `query`, in one thread or one resource (not both).
    #[pyo3(signature = (query, k, *, thread_id=None, resource_id=None))]
    fn search(
        &self,
        py: Python<'_>,
        query: &str,
        k: i64,
        thread_id: Option<&str>,
        resource_id: Option<&str>,
    ) -> PyResult<Vec<(String, f32)>> {
        let k = count("k", k)?;
        let scope = match (thread_id, resource_id) {
            (None, None) => Scope::All,
            (Some(t), None) => Scope::Thread(t),
            (None, Some(r)) => Scope::Resource(r),
            (Some(_), Some(_)) => {
                let text = "search by thread_id or by resource_id, not both";
                return Err(CoreError::InvalidArgument(text.into()).into());
            }
        };
        Ok(self.read(py, |ix| ix.search(query, k, scope)))
    }

    /// The terms this index cuts `text` into.
    fn tokenize(&self, py: Python<'_>, text: &str) -> Vec<String> {
        self.read(py, |ix| ix.tokenizer().tokens(text))
    }
}
