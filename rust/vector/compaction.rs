//! Compaction: once tombstones pass a set fraction of the slots, the graph is rebuilt from
//! the live ones (a new slot numbering, so the index files are written anew at the next save).

use crate::vector::graph::Graph;
use crate::vector::ids::Ids;
use crate::vector::records::RecordTable;
use crate::vector::texts::Texts;
use crate::vector::VectorIndex;

/// Compaction starts when tombstones exceed this fraction of all slots...
const COMPACT_FRACTION: f64 = 0.3;
/// ...and there are at least this many of them (small indexes are not worth rebuilding).
const COMPACT_MIN_TOMBSTONES: usize = 256;

impl VectorIndex {
    /// Rebuilds the graph from the live slots once tombstones pass the set fraction.
    pub(crate) fn maybe_compact(&mut self) {
        let dead = self.graph.slots() - self.graph.live();
        if dead < COMPACT_MIN_TOMBSTONES
            || (dead as f64) < COMPACT_FRACTION * self.graph.slots() as f64
        {
            return;
        }
        self.compact();
    }

    /// Rebuilds the graph without tombstones (same parameters and seed, live slots in order).
    /// Slots that were linked are linked again; queued ones stay queued.
    pub fn compact(&mut self) {
        let mut queued = vec![false; self.graph.slots()];
        self.graph.pending().for_each(|s| queued[s as usize] = true);
        let mut graph = Graph::new(*self.graph.params());
        graph.originals.budget = self.graph.originals.budget;
        let mut ids = Ids::default();
        ids.reserve(self.len());
        let mut records = RecordTable::new();
        records.reserve(self.len());
        let mut texts = Texts::default();
        let live = (0..self.graph.slots() as u32).filter(|&s| !self.graph.is_deleted(s));
        texts.reserve(
            self.len(),
            live.filter_map(|s| self.texts.get(s)).map(str::len).sum(),
        );
        let (mut relink, mut requeue) = (Vec::new(), Vec::new());
        for slot in 0..self.graph.slots() as u32 {
            if !self.graph.is_deleted(slot) {
                let old = &self.graph;
                let new = old
                    .originals
                    .with_row(slot, || old.decoded(slot), |v| graph.push(v));
                if queued[slot as usize] {
                    requeue.push(new);
                } else {
                    relink.push(new);
                }
                ids.push(self.ids.get(slot), true);
                records.push(self.records.get(slot).iter());
                texts.push(self.texts.get(slot));
            }
        }
        let n_relink = relink.len();
        graph.pending = relink.into_iter().chain(requeue).collect();
        graph.link_pending(n_relink);
        // Plans made against the old graph must not fit the new one.
        graph.epoch += self.graph.epoch + 1;
        let numbering = self.numbering + 1;
        *self = VectorIndex::from_graph(graph, ids, records, texts);
        self.numbering = numbering;
    }
}

#[cfg(test)]
mod tests {
    use crate::filter::{Filter, Input};
    use crate::vector::tests::filled;

    #[test]
    fn compaction_keeps_queued_vectors_queued() {
        let (mut idx, data) = filled(600, 4);
        let flat: Vec<f32> = data.iter().take(10).flatten().copied().collect();
        let new_ids: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
        idx.add(new_ids.clone(), &flat, vec![Input::Null; 10])
            .unwrap();
        let gone: Vec<String> = (0..600).step_by(2).map(|i| format!("v{i}")).collect();
        idx.remove(&gone);
        assert_eq!(idx.slots(), 310, "compaction ran");
        assert_eq!(idx.pending_len(), 10);
        let hits = idx.search(&data[3], 1, None, Some(64)).unwrap();
        assert!(hits[0].id == "n3" || hits[0].id == "v3");
        assert_eq!(idx.link_pending(usize::MAX), 10);
    }

    #[test]
    fn removed_ids_are_never_returned_and_compaction_keeps_the_rest() {
        // seed 4
        let (mut idx, data) = filled(1000, 4);
        let gone: Vec<String> = (0..1000).step_by(2).map(|i| format!("v{i}")).collect();
        assert_eq!(idx.remove(&gone), 500);
        assert_eq!(idx.slots(), 500, "compaction ran");
        assert_eq!(idx.len(), 500);
        for q in data.iter().take(40) {
            for h in idx.search(q, 10, None, Some(64)).unwrap() {
                let n: usize = h.id[1..].parse().unwrap();
                assert_eq!(n % 2, 1);
            }
        }
        let f = Filter::vector(&Input::Map(vec![(
            "thread_id".into(),
            Input::Str("t1".into()),
        )]))
        .unwrap();
        let removed = idx.remove_where(f.as_ref().unwrap());
        assert_eq!(removed.len(), 100);
        assert!(idx
            .search(&data[1], 10, f.as_ref(), None)
            .unwrap()
            .is_empty());
    }
}
