//! A vector index: the HNSW graph plus what ties its slots to the outside world — string ids,
//! the metadata record filters read, and the per-thread/per-resource slot lists the planner
//! uses. Upserts tombstone the old slot; once tombstones pass a set fraction the graph is
//! rebuilt from the live slots.
//!
//! Linking is deferred: [`VectorIndex::add`] stores a vector, its id, record and slot lists at
//! once (so it is searchable at once) and queues its slot; [`VectorIndex::link_pending`] links
//! queued slots into the graph in small chunks. Every search stays exact for queued slots.

pub mod adjacency;
pub mod breadth;
pub mod codes;
pub mod compaction;
pub mod graph;
pub mod ids;
pub mod insert;
pub mod persist;
pub mod plan;
pub mod postings;
pub mod prefetch;
pub mod ranges;
pub mod records;
pub mod search;
pub mod texts;
pub mod walk;
pub mod writes;

use std::sync::Mutex;

use crate::distance::Metric;
use crate::error::{CoreError, Result};
use crate::filter::Filter;
use graph::{Graph, LinkPlan, Linked, Near, Params};
use ids::Ids;
use postings::Postings;
use records::RecordTable;
use texts::Texts;

/// Estimated resident bytes, by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUse {
    pub vectors: usize,
    pub codes: usize,
    pub graph: usize,
    pub ids: usize,
    pub metadata: usize,
}

/// One search hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub id: String,
    pub score: f32,
    /// Where the vector lives, valid while [`VectorIndex::numbering`] stays the same.
    pub slot: u32,
}

pub struct VectorIndex {
    pub(crate) graph: Graph,
    /// Every slot's id, and the live slot of each id.
    pub(crate) ids: Ids,
    pub(crate) records: RecordTable,
    pub(crate) texts: Texts,
    pub(crate) postings: Postings,
    /// What the index files hold of it (see `persist`).
    pub(crate) journal: Mutex<persist::Journal>,
    /// How many times the slots were numbered anew (by compaction).
    pub(crate) numbering: u64,
}

impl VectorIndex {
    /// An empty index, valid from construction.
    pub fn new(
        dim: usize,
        metric: Metric,
        m: usize,
        ef_construction: usize,
        seed: u64,
    ) -> Result<VectorIndex> {
        let params = Params::new(dim, metric, m, ef_construction, seed)?;
        Ok(VectorIndex::from_graph(
            Graph::new(params),
            Ids::default(),
            RecordTable::new(),
            Texts::default(),
        ))
    }

    /// Assembles an index from a graph and its per-slot ids (live ones found by id),
    /// records and texts (rebuilds the slot lists).
    pub(crate) fn from_graph(
        graph: Graph,
        ids: Ids,
        records: RecordTable,
        texts: Texts,
    ) -> VectorIndex {
        let live = (0..ids.slots() as u32).filter(|&s| !graph.is_deleted(s));
        let postings = Postings::of_records(&records, live);
        VectorIndex::assemble(graph, ids, records, texts, postings)
    }

    /// An index from its parts, the slot lists already built from the records.
    pub(crate) fn assemble(
        graph: Graph,
        ids: Ids,
        records: RecordTable,
        texts: Texts,
        postings: Postings,
    ) -> VectorIndex {
        VectorIndex {
            graph,
            ids,
            records,
            texts,
            postings,
            journal: Mutex::default(),
            numbering: 0,
        }
    }

    /// Changes whenever the slots are numbered anew: what is kept by slot outside the index
    /// (a [`Hit::slot`], [`VectorIndex::slot`]) holds only while it stays the same.
    pub fn numbering(&self) -> u64 {
        self.numbering
    }

    /// The slot of the live vector `id`.
    pub fn slot(&self, id: &str) -> Option<u32> {
        self.ids.find(id)
    }

    pub fn dim(&self) -> usize {
        self.graph.params().dim
    }

    pub fn metric(&self) -> Metric {
        self.graph.params().metric
    }

    /// Number of live vectors.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Every live id, in slot order.
    pub fn ids(&self) -> Vec<String> {
        (0..self.graph.slots() as u32)
            .filter(|&s| !self.graph.is_deleted(s))
            .map(|s| self.ids.get(s).to_string())
            .collect()
    }

    pub fn contains(&self, id: &str) -> bool {
        self.ids.find(id).is_some()
    }

    fn check_dim(&self, got: usize) -> Result<()> {
        if got != self.dim() {
            return Err(CoreError::DimensionMismatch {
                expected: self.dim(),
                got,
            });
        }
        Ok(())
    }

    /// Links up to `max_count` queued vectors into the graph, oldest first; returns how many.
    pub fn link_pending(&mut self, max_count: usize) -> usize {
        self.graph.link_pending(max_count)
    }

    /// Keeps every float vector in memory as well as in its file (`all`), so searches read
    /// no file; or only while they are few (the default).
    pub fn hold_vectors(&mut self, all: bool) -> Result<()> {
        self.graph.originals.hold_all(all)
    }

    /// How to link the oldest waiting vector, worked out without changing anything (so under
    /// a read lock, beside searches); `None` when none waits. See [`Graph::plan_link`].
    pub fn plan_link(&self) -> Option<LinkPlan> {
        self.graph.plan_link()
    }

    /// Writes a plan from [`VectorIndex::plan_link`] unless the graph changed meanwhile.
    pub fn apply_link(&mut self, plan: LinkPlan) -> Linked {
        self.graph.apply_link(plan)
    }

    /// Links up to `max_count` waiting vectors on `threads` threads, beside searches (a read
    /// lock is enough); they stay out of graph results until [`VectorIndex::finish_batch`].
    /// The first vector of an empty graph must be linked alone first (`link_pending(1)`).
    pub fn link_batch(&self, max_count: usize, threads: usize) -> Vec<u32> {
        self.graph.link_batch(max_count, threads)
    }

    /// Takes a linked batch off the waiting queue.
    pub fn finish_batch(&mut self, batch: &[u32]) {
        self.graph.finish_batch(batch)
    }

    /// Links every waiting vector, `threads` at a time; returns how many were linked.
    pub fn link_all(&mut self, threads: usize) -> usize {
        let mut linked = self.link_pending(1);
        loop {
            let batch = self.link_batch(usize::MAX, threads);
            if batch.is_empty() {
                return linked;
            }
            linked += batch.len();
            self.finish_batch(&batch);
        }
    }

    /// How many live vectors wait to be linked into the graph.
    pub fn pending_len(&self) -> usize {
        self.graph.pending().count()
    }

    /// The ids of every vector whose metadata passes `filter`.
    pub fn ids_where(&self, filter: &Filter) -> Vec<String> {
        search::allowed_slots(self, Some(filter))
            .into_iter()
            .map(|s| self.ids.get(s).to_string())
            .collect()
    }

    /// The stored vector of `id` (unit length for cosine), read from its file.
    pub fn get_vector(&self, id: &str) -> Result<Option<Vec<f32>>> {
        self.ids.find(id).map(|s| self.graph.vector(s)).transpose()
    }

    /// The `k` closest vectors passing `filter`, closest first; `ef` overrides the planner's
    /// base search breadth.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        filter: Option<&Filter>,
        ef: Option<usize>,
    ) -> Result<Vec<Hit>> {
        self.check_dim(query.len())?;
        if query.iter().any(|x| !x.is_finite()) {
            return Err(CoreError::InvalidArgument(
                "the query vector must hold finite numbers".into(),
            ));
        }
        let mut q = query.to_vec();
        self.metric().prepare(&mut q);
        Ok(self.hits(search::search(self, &q, k, filter, ef)))
    }

    /// The exact answer (a scan of every allowed vector): the oracle the graph is tested against.
    pub fn exact_search(
        &self,
        query: &[f32],
        k: usize,
        filter: Option<&Filter>,
    ) -> Result<Vec<Hit>> {
        self.check_dim(query.len())?;
        let mut q = query.to_vec();
        self.metric().prepare(&mut q);
        Ok(self.hits(search::exact(
            self,
            &q,
            k,
            search::allowed_slots(self, filter),
        )))
    }

    fn hits(&self, found: Vec<Near>) -> Vec<Hit> {
        let metric = self.metric();
        // Each id lives in its own allocation: start loading them all before copying any.
        for n in &found {
            crate::vector::graph::prefetch_lines(self.ids.get(n.slot).as_bytes(), 1);
        }
        found
            .into_iter()
            .map(|n| Hit {
                id: self.ids.get(n.slot).to_string(),
                score: metric.score(n.dist),
                slot: n.slot,
            })
            .collect()
    }

    /// Slots ever used, tombstones included (for tests and stats).
    pub fn slots(&self) -> usize {
        self.graph.slots()
    }

    /// Bytes held by the index: heap sizes plus a 16-byte allocator overhead per allocation
    /// (an estimate of resident memory), split into vectors, graph links, ids (with their
    /// lookup) and metadata (records, texts and slot lists).
    pub fn memory_bytes(&self) -> MemoryUse {
        const ALLOC: usize = 16;
        let g = &self.graph;
        let graph = g.links.memory_bytes()
            + g.levels.capacity()
            + g.deleted.capacity()
            + g.queued.capacity()
            + g.pending.capacity() * 4
            + g.probe_bytes();
        let ids = self.ids.memory_bytes();
        let records = self.records.memory_bytes(ALLOC) + self.texts.memory_bytes();
        MemoryUse {
            vectors: g.originals.memory_bytes(),
            codes: g.codes_bytes(),
            graph,
            ids,
            metadata: records + self.postings.memory_bytes(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::filter::Input;
    use crate::vector::graph::tests::clustered;

    pub(crate) fn meta(thread: &str, n: i64) -> Input {
        Input::Map(vec![
            ("thread_id".into(), Input::Str(thread.into())),
            ("n".into(), Input::Int(n)),
        ])
    }

    pub(crate) fn filled(n: usize, seed: u64) -> (VectorIndex, Vec<Vec<f32>>) {
        let data = clustered(seed, n, 16, 10);
        let mut idx = VectorIndex::new(16, Metric::Cosine, 16, 100, 1).unwrap();
        let ids: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
        let flat: Vec<f32> = data.iter().flatten().copied().collect();
        let metas = (0..n)
            .map(|i| meta(&format!("t{}", i % 5), i as i64))
            .collect();
        idx.add(ids, &flat, metas).unwrap();
        idx.link_pending(usize::MAX);
        (idx, data)
    }

    fn thread_filter(thread: &str) -> Option<Filter> {
        Filter::vector(&Input::Map(vec![(
            "thread_id".into(),
            Input::Str(thread.into()),
        )]))
        .unwrap()
    }

    fn hit_ids(hits: &[Hit]) -> Vec<&str> {
        hits.iter().map(|h| h.id.as_str()).collect()
    }

    #[test]
    fn an_unlinked_backlog_is_searched_exactly() {
        // seed 8: 10,000 vectors (5,000 a thread: past the exact-scan limit, so the graph plan
        // runs), none linked.
        let data = clustered(8, 10000, 16, 10);
        let mut idx = VectorIndex::new(16, Metric::Cosine, 16, 100, 1).unwrap();
        let flat: Vec<f32> = data.iter().flatten().copied().collect();
        let ids = (0..10000).map(|i| format!("v{i}")).collect();
        let metas = (0..10000)
            .map(|i| meta(&format!("t{}", i % 2), i))
            .collect();
        idx.add(ids, &flat, metas).unwrap();
        assert_eq!(idx.pending_len(), 10000);
        let f = thread_filter("t1");
        assert!(matches!(
            search::plan_for(&idx, 10, f.as_ref(), None).0,
            plan::Plan::Graph { .. }
        ));
        for q in data.iter().step_by(149).take(20) {
            for filter in [None, f.as_ref()] {
                let got = idx.search(q, 10, filter, None).unwrap();
                let want = idx.exact_search(q, 10, filter).unwrap();
                assert_eq!(hit_ids(&got), hit_ids(&want));
            }
        }
    }

    #[test]
    fn a_partly_linked_index_never_misses_a_queued_vector() {
        // seed 13: the first 5,000 linked, the next 1,000 queued; each queued vector is its own
        // nearest neighbour, so it must come first when searched for.
        let data = clustered(13, 6000, 16, 10);
        let mut idx = VectorIndex::new(16, Metric::Euclidean, 16, 100, 1).unwrap();
        let flat: Vec<f32> = data.iter().flatten().copied().collect();
        let ids: Vec<String> = (0..6000).map(|i| format!("v{i}")).collect();
        let metas: Vec<Input> = (0..6000).map(|i| meta("t0", i)).collect();
        idx.add(
            ids[..5000].to_vec(),
            &flat[..5000 * 16],
            metas[..5000].to_vec(),
        )
        .unwrap();
        assert_eq!(idx.link_pending(usize::MAX), 5000);
        idx.add(
            ids[5000..].to_vec(),
            &flat[5000 * 16..],
            metas[5000..].to_vec(),
        )
        .unwrap();
        assert_eq!(idx.pending_len(), 1000);
        let f = thread_filter("t0");
        for i in (5000..6000).step_by(50) {
            for filter in [None, f.as_ref()] {
                let got = idx.search(&data[i], 10, filter, None).unwrap();
                assert_eq!(got[0].id, format!("v{i}"));
            }
        }
    }

    #[test]
    fn deleting_a_queued_vector_drops_it_from_the_queue() {
        let data = clustered(6, 300, 16, 10);
        let mut idx = VectorIndex::new(16, Metric::Cosine, 16, 100, 1).unwrap();
        let flat: Vec<f32> = data.iter().flatten().copied().collect();
        let ids: Vec<String> = (0..300).map(|i| format!("v{i}")).collect();
        let metas = (0..300).map(|i| meta("t0", i)).collect();
        idx.add(ids.clone(), &flat, metas).unwrap();
        assert_eq!(idx.link_pending(100), 100);
        let gone: Vec<String> = ids[150..250].to_vec();
        assert_eq!(idx.remove(&gone), 100);
        assert_eq!(idx.pending_len(), 100);
        for q in data.iter().skip(150).take(100) {
            let hits = idx.search(q, 300, None, None).unwrap();
            assert_eq!(hits.len(), 200);
            assert!(hits.iter().all(|h| !gone.contains(&h.id)));
        }
        assert_eq!(idx.link_pending(usize::MAX), 100);
        assert_eq!(idx.pending_len(), 0);
    }

    #[test]
    fn linking_in_chunks_builds_the_graph_of_one_at_a_time_inserts() {
        // seed 17 for data, 18 for queries: drained 64 at a time, the graph equals the one built
        // by inserting each vector in turn, and keeps recall@10 >= 0.95.
        let data = clustered(17, 3000, 32, 30);
        let flat: Vec<f32> = data.iter().flatten().copied().collect();
        let ids: Vec<String> = (0..3000).map(|i| format!("v{i}")).collect();
        let mut idx = VectorIndex::new(32, Metric::Cosine, 16, 200, 42).unwrap();
        idx.add(ids, &flat, vec![Input::Null; 3000]).unwrap();
        let mut rounds = 0;
        while idx.link_pending(64) > 0 {
            rounds += 1;
        }
        assert_eq!(rounds, 3000_usize.div_ceil(64));
        let mut one_by_one = Graph::new(*idx.graph.params());
        for v in &data {
            one_by_one.insert(v);
        }
        assert_eq!(
            idx.graph.links.level0_words().collect::<Vec<_>>(),
            one_by_one.links.level0_words().collect::<Vec<_>>()
        );
        assert_eq!(idx.graph.entry(), one_by_one.entry());
        let mut hits = 0;
        let queries = clustered(18, 100, 32, 30);
        for q in &queries {
            let mut p = q.clone();
            Metric::Cosine.prepare(&mut p);
            let truth = crate::vector::graph::tests::exact(&idx.graph, &p, 10);
            let got = idx.graph.search(&p, 10, 64, |_| true);
            hits += got.iter().filter(|n| truth.contains(&n.slot)).count();
        }
        assert!(hits >= 950, "recall {}", hits as f64 / 1000.0);
    }
}
