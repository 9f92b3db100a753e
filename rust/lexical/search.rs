//! Searching the index: choosing how to walk (the query terms' postings or the scope's own
//! documents), counting terms, scoring by BM25 in context.

use std::collections::BTreeSet;

// Maps keyed by document slots, numbers the index hands out itself (no key comes from outside),
// take a plain multiplicative hash.
use rustc_hash::FxHashMap;

use super::{in_scope, LexicalIndex, Scope};

/// How a search finds the documents holding the query terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Walk {
    /// Every posting of every query term, keeping those in scope.
    Postings,
    /// Every document in scope, looking each query term up in it.
    Documents,
}

/// Reading one document of a scope costs about as much as reading this many postings: a
/// posting list is read in order, a document is a jump in memory and a search of its terms
/// (measured: about 400 ns against 2 ns).
const DOCUMENT_COST: usize = 200;

/// Each matching document's count of every query term, rows of one flat table.
struct TermCounts {
    width: usize,
    rows: FxHashMap<u32, usize>,
    table: Vec<u32>,
}

impl TermCounts {
    fn new(width: usize) -> Self {
        TermCounts {
            width,
            rows: FxHashMap::default(),
            table: Vec::new(),
        }
    }

    fn set(&mut self, slot: u32, term: usize, count: u32) {
        let (width, table) = (self.width, &mut self.table);
        let at = *self.rows.entry(slot).or_insert_with(|| {
            table.resize(table.len() + width, 0);
            table.len() - width
        });
        self.table[at + term] = count;
    }

    fn get(&self, slot: u32) -> Option<&[u32]> {
        let at = *self.rows.get(&slot)?;
        Some(&self.table[at..at + self.width])
    }

    fn iter(&self) -> impl Iterator<Item = (u32, &[u32])> {
        self.rows
            .iter()
            .map(|(&slot, &at)| (slot, &self.table[at..at + self.width]))
    }
}

/// Resource number of a message that has none.
impl LexicalIndex {
    /// Reading a scope's documents when that touches less than the query terms' postings:
    /// a thread among many (its documents), rather than every message holding a common word.
    fn cheaper_walk(&self, terms: &[u32], wanted: Option<(bool, u32)>) -> Walk {
        let Some(wanted) = wanted else {
            return Walk::Postings;
        };
        let postings: usize = terms.iter().map(|&t| self.postings[t as usize].len()).sum();
        let docs = match wanted {
            (true, thread) => self.sequence.get(&thread).map_or(0, BTreeSet::len),
            (false, resource) => self
                .resource_threads
                .get(&resource)
                .map_or(0, |threads| threads.values().sum()),
        };
        if docs.saturating_mul(DOCUMENT_COST) < postings {
            Walk::Documents
        } else {
            Walk::Postings
        }
    }

    /// Each live document in scope holding a query term, with its count of every term.
    fn term_counts(&self, terms: &[u32], wanted: Option<(bool, u32)>, walk: Walk) -> TermCounts {
        let mut counts = TermCounts::new(terms.len());
        match (walk, wanted) {
            (Walk::Documents, Some(wanted)) => {
                for slot in self.scope_docs(wanted) {
                    let doc = &self.docs[slot as usize];
                    for (i, term) in terms.iter().enumerate() {
                        if let Ok(at) = doc.terms.binary_search_by_key(term, |&(t, _)| t) {
                            counts.set(slot, i, doc.terms[at].1);
                        }
                    }
                }
            }
            _ => {
                for (i, &term) in terms.iter().enumerate() {
                    for p in &self.postings[term as usize] {
                        if in_scope(wanted, p.thread, p.resource) && self.docs[p.doc as usize].alive
                        {
                            counts.set(p.doc, i, p.tf);
                        }
                    }
                }
            }
        }
        counts
    }

    /// The live documents of a thread (`(true, thread)`) or a resource (`(false, resource)`).
    fn scope_docs(&self, (is_thread, number): (bool, u32)) -> Vec<u32> {
        let of_thread = |thread: &u32| {
            self.sequence
                .get(thread)
                .into_iter()
                .flatten()
                .map(|&(_, slot)| slot)
        };
        if is_thread {
            return of_thread(&number).collect();
        }
        self.resource_threads
            .get(&number)
            .into_iter()
            .flat_map(|threads| threads.keys())
            .flat_map(of_thread)
            .filter(|&slot| self.docs[slot as usize].resource == number)
            .collect()
    }

    /// BM25 of one document of `len` terms holding the query terms `tfs` times.
    fn bm25(&self, idfs: &[f32], tfs: &[u32], len: u32, avg_len: f32) -> f32 {
        let norm = self.k1 * (1.0 - self.b + self.b * len as f32 / avg_len.max(1e-9));
        idfs.iter()
            .zip(tfs)
            .filter(|(_, &tf)| tf > 0)
            .map(|(idf, &tf)| idf * tf as f32 * (self.k1 + 1.0) / (tf as f32 + norm))
            .sum()
    }

    /// The `k` best messages for `query` within `scope`, best first, as `(id, score)`; ties go
    /// to the earlier-added message. Messages sharing no term with the query, in their own text
    /// or (with a context weight) in their context, are not returned.
    pub fn search(&self, query: &str, k: usize, scope: Scope<'_>) -> Vec<(String, f32)> {
        self.search_by(query, k, scope, None)
    }

    /// [`LexicalIndex::search`], walking as told or, without `walk`, as is cheaper.
    pub(super) fn search_by(
        &self,
        query: &str,
        k: usize,
        scope: Scope<'_>,
        walk: Option<Walk>,
    ) -> Vec<(String, f32)> {
        let wanted = match scope {
            Scope::All => None,
            Scope::Thread(t) => match self.threads.get(t) {
                Some(n) => Some((true, n)),
                None => return Vec::new(),
            },
            Scope::Resource(r) => match self.resources.get(r) {
                Some(n) => Some((false, n)),
                None => return Vec::new(),
            },
        };
        if k == 0 || self.live == 0 {
            return Vec::new();
        }
        let mut terms: Vec<u32> = self
            .tokenizer
            .tokens(query)
            .iter()
            .filter_map(|t| self.terms.get(t))
            .filter(|&t| self.df[t as usize] > 0)
            .collect();
        terms.sort_unstable();
        terms.dedup();
        let n = self.live as f32;
        let avg_len = self.total_len as f32 / n;
        let idfs: Vec<f32> = terms
            .iter()
            .map(|&t| {
                let df = self.df[t as usize] as f32;
                (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
            })
            .collect();
        let walk = walk.unwrap_or_else(|| self.cheaper_walk(&terms, wanted));
        let counts = self.term_counts(&terms, wanted, walk);
        let mut scores: FxHashMap<u32, f32> = counts
            .iter()
            .map(|(slot, tfs)| {
                let len = self.docs[slot as usize].len;
                (slot, self.bm25(&idfs, tfs, len, avg_len))
            })
            .collect();
        let turns = self.context_turns;
        if turns > 0 && self.context_weight > 0.0 {
            // A message's context holds a match when it or one of the `turns` before it does.
            let mut scored: Vec<u32> = counts.iter().map(|(slot, _)| slot).collect();
            for (slot, _) in counts.iter() {
                scored.extend(self.neighbours(slot, false, turns));
            }
            scored.sort_unstable();
            scored.dedup();
            let context_avg = (turns + 1) as f32 * avg_len;
            let mut tfs = vec![0; terms.len()];
            for slot in scored {
                let doc = &self.docs[slot as usize];
                if !in_scope(wanted, doc.thread, doc.resource) {
                    continue;
                }
                tfs.fill(0);
                let mut len = 0;
                for s in std::iter::once(slot).chain(self.neighbours(slot, true, turns)) {
                    len += self.docs[s as usize].len;
                    if let Some(own) = counts.get(s) {
                        tfs.iter_mut().zip(own).for_each(|(sum, tf)| *sum += tf);
                    }
                }
                let context = self.bm25(&idfs, &tfs, len, context_avg);
                if context > 0.0 {
                    *scores.entry(slot).or_insert(0.0) += self.context_weight * context;
                }
            }
        }
        let mut ranked: Vec<(u32, f32)> = scores.into_iter().collect();
        let by_rank = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if ranked.len() > k {
            ranked.select_nth_unstable_by(k - 1, by_rank);
            ranked.truncate(k);
        }
        ranked.sort_unstable_by(by_rank);
        ranked
            .into_iter()
            .map(|(slot, score)| (self.docs[slot as usize].id.clone(), score))
            .collect()
    }
}
