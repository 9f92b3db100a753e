//! Writing to an index: checked batches of upserts, deletes by id or by filter. Upserts
//! tombstone the old slot of an id; deletes tombstone theirs, and may start a compaction.

use std::collections::HashMap;

use crate::error::{CoreError, Result};
use crate::filter::{Filter, Input, Record};
use crate::vector::{postings, VectorIndex};

impl VectorIndex {
    /// Checks a whole batch before anything changes: lengths agree, ids non-blank, values finite.
    pub fn check_batch(&self, ids: &[String], vectors: &[f32], metadata: &[Input]) -> Result<()> {
        let dim = self.dim();
        if vectors.len() != ids.len() * dim {
            if !ids.is_empty() && vectors.len().is_multiple_of(ids.len()) {
                self.check_dim(vectors.len() / ids.len())?;
            }
            return Err(CoreError::InvalidArgument(format!(
                "{} ids but {} values for vectors of dimension {dim}",
                ids.len(),
                vectors.len()
            )));
        }
        if metadata.len() != ids.len() {
            return Err(CoreError::InvalidArgument(format!(
                "{} ids but {} metadata entries",
                ids.len(),
                metadata.len()
            )));
        }
        if ids.iter().any(|id| id.trim().is_empty()) {
            return Err(CoreError::InvalidArgument(
                "vector ids must be non-empty strings".into(),
            ));
        }
        if vectors.iter().any(|x| !x.is_finite()) {
            return Err(CoreError::InvalidArgument(
                "vectors must hold finite numbers".into(),
            ));
        }
        Ok(())
    }

    /// Inserts or replaces vectors by id. `vectors` is row-major `(ids.len(), dim)`; each
    /// metadata entry is a mapping (anything else counts as empty). A repeated id keeps its
    /// last occurrence. Within the batch, vectors are stored grouped by resource then thread,
    /// so the exact scan of one thread reads one run of memory. The new slots are searchable
    /// at once and queued to be linked into the graph (see [`VectorIndex::link_pending`]).
    pub fn add(&mut self, ids: Vec<String>, vectors: &[f32], metadata: Vec<Input>) -> Result<()> {
        self.add_stored(ids, vectors, metadata, None)
    }

    /// [`VectorIndex::add`], each slot keeping `texts`, the metadata's JSON as the database
    /// stores it (see [`Texts`](crate::vector::texts::Texts)), if given.
    pub fn add_stored(
        &mut self,
        ids: Vec<String>,
        vectors: &[f32],
        metadata: Vec<Input>,
        texts: Option<Vec<String>>,
    ) -> Result<()> {
        self.check_batch(&ids, vectors, &metadata)?;
        if texts.as_ref().is_some_and(|t| t.len() != ids.len()) {
            return Err(CoreError::InvalidArgument(format!(
                "{} ids but {} metadata texts",
                ids.len(),
                texts.map_or(0, |t| t.len())
            )));
        }
        let dim = self.dim();
        let records: Vec<Record> = metadata.into_iter().map(Record::from_input).collect();
        let mut last: HashMap<&str, usize> = HashMap::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            last.insert(id, i);
        }
        let mut order: Vec<usize> = (0..ids.len())
            .filter(|&i| last[ids[i].as_str()] == i)
            .collect();
        let keys: Vec<_> = records.iter().map(postings::locality_key).collect();
        order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
        let batch = order.len();
        self.graph.reserve(batch);
        self.ids.reserve(batch);
        self.records.reserve(batch);
        let bytes = texts.iter().flatten().map(String::len).sum();
        self.texts.reserve(batch, bytes);
        for i in order {
            self.remove_one(&ids[i]);
            let slot = self.graph.push(&vectors[i * dim..(i + 1) * dim]);
            self.postings
                .add(slot, records[i].iter().map(|(k, v)| (k, v.scalar())));
            self.ids.push(&ids[i], true);
            self.records.push_record(&records[i]);
            self.texts.push(texts.as_ref().map(|t| t[i].as_str()));
        }
        if batch >= postings::SETTLE_BATCH {
            self.postings.settle_ranges();
        }
        Ok(())
    }

    /// Gives each live id in `ids` that holds no metadata text its text in `texts`.
    pub fn fill_texts(&mut self, ids: &[String], texts: &[String]) -> Result<()> {
        if ids.len() != texts.len() {
            return Err(CoreError::InvalidArgument(format!(
                "{} ids but {} metadata texts",
                ids.len(),
                texts.len()
            )));
        }
        let mut by_slot = HashMap::with_capacity(ids.len());
        for (id, text) in ids.iter().zip(texts) {
            if let Some(slot) = self.ids.find(id) {
                by_slot.insert(slot, text.as_str());
            }
        }
        self.texts.fill(|slot| by_slot.get(&slot).copied());
        Ok(())
    }

    /// How many live vectors hold no metadata text.
    pub fn texts_missing(&self) -> usize {
        (0..self.graph.slots() as u32)
            .filter(|&s| !self.graph.is_deleted(s) && self.texts.get(s).is_none())
            .count()
    }

    fn remove_one(&mut self, id: &str) -> bool {
        let Some(slot) = self.ids.remove(id) else {
            return false;
        };
        self.graph.mark_deleted(slot);
        self.journal
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .removed
            .push(slot);
        let graph = &self.graph;
        self.postings
            .remove(self.records.get(slot).iter(), |s| graph.is_deleted(s));
        true
    }

    /// Deletes vectors by id; returns how many existed.
    pub fn remove(&mut self, ids: &[String]) -> usize {
        let n = ids.iter().filter(|id| self.remove_one(id)).count();
        self.maybe_compact();
        n
    }

    /// Deletes every vector whose metadata passes `filter`; returns their ids.
    pub fn remove_where(&mut self, filter: &Filter) -> Vec<String> {
        let doomed = self.ids_where(filter);
        for id in &doomed {
            self.remove_one(id);
        }
        self.maybe_compact();
        doomed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distance::Metric;
    use crate::vector::tests::{filled, meta};

    #[test]
    fn upsert_replaces_by_id() {
        let (mut idx, data) = filled(50, 2);
        idx.add(vec!["v3".into()], &data[40], vec![meta("t9", 3)])
            .unwrap();
        assert_eq!(idx.len(), 50);
        let hits = idx.search(&data[40], 2, None, None).unwrap();
        assert!(hits.iter().any(|h| h.id == "v3"));
        let f = Filter::vector(&Input::Map(vec![(
            "thread_id".into(),
            Input::Str("t9".into()),
        )]))
        .unwrap();
        let only = idx.search(&data[0], 5, f.as_ref(), None).unwrap();
        assert_eq!(
            only.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
            vec!["v3"]
        );
    }

    #[test]
    fn a_repeated_id_in_one_batch_keeps_its_last_occurrence() {
        let mut idx = VectorIndex::new(2, Metric::Euclidean, 16, 50, 0).unwrap();
        let ids = vec!["a".to_string(), "b".into(), "a".into()];
        let metas = vec![meta("t2", 0), meta("t1", 1), meta("t0", 2)];
        idx.add(ids, &[0.0, 0.0, 5.0, 5.0, 9.0, 9.0], metas)
            .unwrap();
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.get_vector("a").unwrap(), Some(vec![9.0f32, 9.0]));
        let f = Filter::vector(&Input::Map(vec![(
            "thread_id".into(),
            Input::Str("t0".into()),
        )]))
        .unwrap();
        let hits = idx.search(&[0.0, 0.0], 5, f.as_ref(), None).unwrap();
        assert_eq!(
            hits.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
            vec!["a"]
        );
    }

    #[test]
    fn bad_batches_change_nothing() {
        let (mut idx, _) = filled(10, 2);
        let e = idx
            .add(vec!["a".into()], &[1.0; 8], vec![Input::Null])
            .unwrap_err();
        assert_eq!(
            e,
            CoreError::DimensionMismatch {
                expected: 16,
                got: 8
            }
        );
        let e = idx
            .add(vec![" ".into()], &[1.0; 16], vec![Input::Null])
            .unwrap_err();
        assert!(matches!(e, CoreError::InvalidArgument(_)));
        let e = idx
            .add(vec!["a".into()], &[f32::NAN; 16], vec![Input::Null])
            .unwrap_err();
        assert!(matches!(e, CoreError::InvalidArgument(_)));
        assert!(matches!(
            idx.search(&[1.0; 3], 1, None, None),
            Err(CoreError::DimensionMismatch { .. })
        ));
        assert_eq!(idx.len(), 10);
    }
}
