//! The binding of the vector index.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock};

use numpy::{PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyList, PyString, PyType};

use super::convert::{input_from_py, inputs_from_json, strict_input_from_py};
use super::objects::{set_attr, Blank};
use crate::distance::Metric;
use crate::error::CoreError;
use crate::filter::Filter;
use crate::vector::graph::Linked;
use crate::vector::{persist, plan};
use crate::vector::{Hit, VectorIndex};

fn vector_filter(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Filter>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => Ok(Filter::vector(&strict_input_from_py(o)?)?),
    }
}

pub(crate) fn count(name: &str, value: i64) -> PyResult<usize> {
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
pub(crate) struct PyVectorIndex {
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
    /// as dicts, or as JSON texts in `metadata_json` (parsed without the GIL), or both (the
    /// dicts are read, the texts kept). Each vector keeps its metadata text, if given, for
    /// `query` to hand out. They are
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
        let (metadata, texts) = match (metadata, metadata_json) {
            (Some(dicts), texts) => (
                dicts
                    .iter()
                    .map(input_from_py)
                    .collect::<PyResult<Vec<_>>>()?,
                texts,
            ),
            (None, Some(texts)) => (inputs_from_json(py, &texts)?, Some(texts)),
            (None, None) => {
                let text = "give metadata, metadata_json or both";
                return Err(CoreError::InvalidArgument(text.into()).into());
            }
        };
        Ok(self.write(py, |ix| {
            ix.add_stored(ids, flat, metadata, texts)?;
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
    /// taken off the queue under the write lock. With `rounds`, returns after that many
    /// batches, so a caller can stop between them. Returns how many were linked.
    #[pyo3(signature = (threads, batch=8192, rounds=None))]
    fn link_all(
        &self,
        py: Python<'_>,
        threads: i64,
        batch: i64,
        rounds: Option<i64>,
    ) -> PyResult<usize> {
        let (threads, batch) = (
            count("threads", threads)?.max(1),
            count("batch", batch)?.max(1),
        );
        let rounds = rounds.map(|r| count("rounds", r)).transpose()?;
        let lock = &self.inner;
        Ok(py.detach(|| {
            let mut linked = lock
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .link_pending(1);
            for _ in 0..rounds.unwrap_or(usize::MAX) {
                let done = lock
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .link_batch(batch, threads);
                if done.is_empty() {
                    break;
                }
                linked += done.len();
                lock.write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .finish_batch(&done);
            }
            linked
        }))
    }

    /// How many vectors wait to be linked into the graph.
    #[getter]
    fn pending(&self, py: Python<'_>) -> usize {
        self.read(py, |ix| ix.pending_len())
    }

    /// Whether a save would write more than the changes and linking since the last one: a
    /// search breadth measured since, or a file of the previous format (or none yet).
    #[getter]
    fn outdated(&self, py: Python<'_>) -> bool {
        self.read(py, persist::outdated)
    }

    /// Keeps every float vector in memory as well as in its file (`all`), so searches read no
    /// file; or only while they take at most 16 MiB (the default).
    fn hold_vectors(&self, py: Python<'_>, all: bool) -> PyResult<()> {
        Ok(self.write(py, |ix| ix.hold_vectors(all))?)
    }

    /// Deletes vectors by id; returns how many existed.
    fn remove(&self, py: Python<'_>, ids: Vec<String>) -> usize {
        self.write(py, |ix| ix.remove(&ids))
    }

    /// Gives each live id in `ids` that holds no metadata text its text in `texts`.
    fn fill_texts(&self, py: Python<'_>, ids: Vec<String>, texts: Vec<String>) -> PyResult<()> {
        Ok(self.write(py, |ix| ix.fill_texts(&ids, &texts))?)
    }

    /// How many live vectors hold no metadata text.
    #[getter]
    fn texts_missing(&self, py: Python<'_>) -> usize {
        self.read(py, |ix| ix.texts_missing())
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

    /// [`search`] as `result` objects, built without running Python: each gets `id`,
    /// `score`, `vector=None` and, as `_text`, the metadata text its vector holds, as UTF-8
    /// bytes (decoded when first read; bytes cost less to make than a string). `k` is clamped to the index's size. Returns the results and the ids
    /// whose vectors hold no text (their results hold no `_text`).
    #[pyo3(signature = (vector, k, filter, ef, *, result))]
    fn query<'py>(
        &self,
        py: Python<'py>,
        vector: PyReadonlyArray1<'_, f32>,
        k: i64,
        filter: Option<&Bound<'_, PyAny>>,
        ef: Option<i64>,
        result: &Bound<'py, PyType>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<Bound<'py, PyString>>)> {
        let k = count("k", k)?;
        let ef = ef.map(|e| count("ef", e)).transpose()?;
        let filter = vector_filter(filter)?;
        let owned;
        let q = match vector.as_slice() {
            Ok(q) => q,
            Err(_) => {
                owned = vector.as_array().to_vec();
                &owned[..]
            }
        };
        // The hits' texts are copied out under the index's lock, back to back in one string.
        let found = self.read(py, |ix| {
            let hits = ix.search(q, k.min(ix.len().max(1)), filter.as_ref(), ef)?;
            let mut joined = String::new();
            let spans: Vec<Option<(usize, usize)>> = hits
                .iter()
                .map(|h| {
                    ix.texts.get(h.slot).map(|text| {
                        joined.push_str(text);
                        (joined.len() - text.len(), joined.len())
                    })
                })
                .collect();
            Ok::<_, CoreError>((hits, joined, spans))
        });
        let (hits, joined, spans) = found?;
        let blank = Blank::of(result)?;
        let keys = [
            intern!(py, "id"),
            intern!(py, "score"),
            intern!(py, "_text"),
        ];
        let out = PyList::empty(py);
        let mut missing = Vec::new();
        for (hit, span) in hits.into_iter().zip(spans) {
            // `vector` stays the class's default (None); the instance holds the rest.
            let obj = blank.make()?;
            let id = PyString::new(py, &hit.id);
            set_attr(&obj, keys[0], &id)?;
            set_attr(&obj, keys[1], &PyFloat::new(py, hit.score as f64))?;
            match span {
                Some((from, to)) => set_attr(
                    &obj,
                    keys[2],
                    &PyBytes::new(py, &joined.as_bytes()[from..to]),
                )?,
                None => missing.push(id),
            }
            out.append(obj)?;
        }
        Ok((out, missing))
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

    /// The breadth an unfiltered search of `k` hits uses when none is given: measured on the
    /// graph on first use (see `breadth`).
    fn default_ef(&self, py: Python<'_>, k: i64) -> PyResult<usize> {
        let k = count("k", k)?.max(1);
        Ok(self.read(py, |ix| ix.graph.default_ef(k, plan::EF_DEFAULT, None)))
    }

    /// The stored vector of `id` (unit length for cosine), or None.
    fn get_vector<'py>(
        &self,
        py: Python<'py>,
        id: &str,
    ) -> PyResult<Option<Bound<'py, PyArray1<f32>>>> {
        let v = self.read(py, |ix| ix.get_vector(id))?;
        Ok(v.map(|v| PyArray1::from_vec(py, v)))
    }

    fn __contains__(&self, py: Python<'_>, id: &str) -> bool {
        self.read(py, |ix| ix.contains(id))
    }

    /// Saves the index to `path` (and its float vectors beside it, `path` with the suffix
    /// `.vectors`), tagged with the database `generation` and the index's `origin` there:
    /// appends what changed since the last save to the files it last wrote, else writes both
    /// anew. Searches go on meanwhile; writes wait. Returns how many vectors the file holds as
    /// waiting to be linked.
    fn save(
        &self,
        py: Python<'_>,
        path: PathBuf,
        generation: u64,
        origin: &str,
    ) -> PyResult<usize> {
        let written = self.read(py, |ix| persist::save(ix, &path, generation, origin))?;
        let pending = written.pending;
        self.write(py, |ix| persist::finish(ix, written))?;
        Ok(pending)
    }

    /// Opens an index file and the vectors file beside it: returns `(index, generation,
    /// origin)`; raises IndexCorruptError for a file (or vectors file) that cannot be trusted.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<(Self, u64, String)> {
        let (index, generation, origin) = py.detach(|| persist::load(&path))?;
        Ok((
            PyVectorIndex {
                inner: RwLock::new(index),
                writers: AtomicUsize::new(0),
            },
            generation,
            origin.into(),
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
