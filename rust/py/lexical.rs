//! The binding of the lexical (BM25) index.

use std::sync::{PoisonError, RwLock};

use pyo3::prelude::*;

use super::vector::count;
use crate::error::CoreError;
use crate::lexical::{LexicalIndex, Scope, Tokenizer};

/// BM25 over message text, searchable by thread or resource; safe to share between threads.
#[pyclass(name = "LexicalIndex", module = "threadrecall._core", frozen)]
pub(crate) struct PyLexicalIndex {
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
