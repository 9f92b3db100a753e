//! The Python binding: thin wrappers over the core, numpy in and out, one error mapping.

use pyo3::prelude::*;

use crate::error::CoreError;

pyo3::import_exception!(threadrecall.errors, InvalidFilterError);
pyo3::import_exception!(threadrecall.errors, FilterTypeError);
pyo3::import_exception!(threadrecall.errors, DimensionMismatchError);
pyo3::import_exception!(threadrecall.errors, IndexCorruptError);
pyo3::import_exception!(threadrecall.errors, InvalidArgumentError);

impl From<CoreError> for PyErr {
    fn from(err: CoreError) -> PyErr {
        let text = err.to_string();
        match err {
            CoreError::InvalidFilter(_) => InvalidFilterError::new_err(text),
            CoreError::FilterType(_) => FilterTypeError::new_err(text),
            CoreError::DimensionMismatch { .. } => DimensionMismatchError::new_err(text),
            CoreError::IndexCorrupt(_) => IndexCorruptError::new_err(text),
            CoreError::InvalidArgument(_) => InvalidArgumentError::new_err(text),
            CoreError::Io(_) => pyo3::exceptions::PyOSError::new_err(text),
        }
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<PyVectorIndex>()?;
    Ok(())
}

// ---- vector index ----

use std::path::PathBuf;
use std::sync::{PoisonError, RwLock};

use numpy::{PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};

use crate::distance::Metric;
use crate::filter::{Filter, Input};
use crate::index::{Hit, VectorIndex};
use crate::persist;

/// Metadata and filters cross as JSON-like trees.
fn vector_input(obj: &Bound<'_, PyAny>) -> PyResult<Input> {
    let json = obj.py().import("json")?.call_method1("dumps", (obj,))?;
    Ok(Input::from_json(&json.extract::<String>()?)?)
}

fn vector_filter(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Filter>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => Ok(Filter::vector(&vector_input(o)?)?),
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
}

impl PyVectorIndex {
    fn read<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&VectorIndex) -> T + Send) -> T {
        py.detach(|| f(&self.inner.read().unwrap_or_else(PoisonError::into_inner)))
    }

    fn write<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut VectorIndex) -> T + Send) -> T {
        py.detach(|| f(&mut self.inner.write().unwrap_or_else(PoisonError::into_inner)))
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
        })
    }

    /// Inserts or replaces vectors by id; `vectors` is float32 `(len(ids), dim)`.
    fn add(
        &self,
        py: Python<'_>,
        ids: Vec<String>,
        vectors: PyReadonlyArray2<'_, f32>,
        metadata: Vec<Bound<'_, PyAny>>,
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
        let flat = contiguous(&vectors)?;
        let metadata = metadata
            .iter()
            .map(vector_input)
            .collect::<PyResult<Vec<_>>>()?;
        Ok(self.write(py, |ix| ix.add(ids, flat, metadata))?)
    }

    /// Deletes vectors by id; returns how many existed.
    fn remove(&self, py: Python<'_>, ids: Vec<String>) -> usize {
        self.write(py, |ix| ix.remove(&ids))
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
    fn save(&self, py: Python<'_>, path: PathBuf, generation: u64) -> PyResult<()> {
        Ok(self.read(py, |ix| persist::save(ix, &path, generation))?)
    }

    /// Reads an index file: returns `(index, generation)`; raises IndexCorruptError.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<(Self, u64)> {
        let (index, generation) = py.detach(|| persist::load(&path))?;
        Ok((
            PyVectorIndex {
                inner: RwLock::new(index),
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

    /// Approximate bytes held by the index.
    fn memory_bytes(&self, py: Python<'_>) -> usize {
        self.read(py, |ix| ix.memory_bytes())
    }
}
