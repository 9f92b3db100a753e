//! The binding of the per-thread message timeline.

use std::collections::HashSet;
use std::sync::{PoisonError, RwLock};

use pyo3::prelude::*;
use pyo3::types::PyString;

use super::convert::{input_from_py, inputs_from_json, one_metadata_form, record_from_py};
use crate::error::CoreError;
use crate::filter::{Filter, Record};
use crate::timeline::{
    best_first, Bound as TimeBound, Fusion, Include, PageQuery, Row, RowRef, Timeline,
};

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
pub(crate) struct PyTimeline {
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
