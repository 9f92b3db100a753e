//! The lexical message index: BM25 over message text, an inverted index whose postings carry
//! each message's thread and resource so a thread- or resource-scoped search is decided while
//! walking the query terms' postings. A scope much smaller than those postings (a thread, when
//! the query holds a common word) is searched by reading its own documents instead, so its cost
//! does not grow with the rest of the corpus.
//!
//! Text is cut by [`tokenize`]: lower-cased, split into Unicode alphanumeric words, English stop
//! words dropped and a light suffix stemmer applied when the index is built with them. Scores
//! are Okapi BM25 with corpus-wide statistics (document frequency and average length over every
//! live message): `idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))` with
//! `idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`.
//!
//! A message is also scored in context: its text joined with the `context_turns` messages
//! right before it in its thread (by the order given at upsert), as one BM25 document of their
//! summed term counts and lengths (against `context_turns + 1` times the average length),
//! weighted by `context_weight` and added to its own score. A reply is often found by the words
//! of the turns it answers. The context is looked up at search time, so removing or replacing
//! a message re-links its neighbours at once.
//!
//! Removing or replacing a message marks its slot dead (its postings are skipped and its terms'
//! frequencies corrected at once); dead postings are swept when they outnumber the live ones.

mod search;
mod tokenizer;

pub use tokenizer::Tokenizer;

use std::collections::{BTreeSet, HashMap};

/// Which documents a search may return.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scope<'a> {
    All,
    Thread(&'a str),
    Resource(&'a str),
}

#[derive(Debug, Clone, Copy)]
struct Posting {
    doc: u32,
    thread: u32,
    resource: u32,
    tf: u32,
}

#[derive(Debug, Clone)]
struct Doc {
    id: String,
    thread: u32,
    resource: u32,
    order: i64,
    /// The live documents right before and after this one in its thread, or `NO_DOC`.
    prev: u32,
    next: u32,
    len: u32,
    /// `(term, count)`, by term.
    terms: Vec<(u32, u32)>,
    alive: bool,
}

/// Strings stored once and named by a number.
#[derive(Debug, Default)]
struct Names {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Names {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }
}

/// Whether a message of `thread` and `resource` is in the scope `wanted`: `(true, thread)`,
/// `(false, resource)`, or anything (`None`).
fn in_scope(wanted: Option<(bool, u32)>, thread: u32, resource: u32) -> bool {
    match wanted {
        None => true,
        Some((true, t)) => thread == t,
        Some((false, r)) => resource == r,
    }
}

const NO_RESOURCE: u32 = u32::MAX;
/// Slot of a neighbour that does not exist.
const NO_DOC: u32 = u32::MAX;

/// BM25 over messages, searchable by thread or resource.
#[derive(Debug)]
pub struct LexicalIndex {
    tokenizer: Tokenizer,
    k1: f32,
    b: f32,
    context_turns: usize,
    context_weight: f32,
    terms: Names,
    postings: Vec<Vec<Posting>>,
    df: Vec<u32>,
    docs: Vec<Doc>,
    slot_of: HashMap<String, u32>,
    threads: Names,
    resources: Names,
    /// Live documents of each thread by `(order, slot)`: where a new message is linked in.
    sequence: HashMap<u32, BTreeSet<(i64, u32)>>,
    /// Live documents per resource and thread: a resource's documents, found via its threads.
    resource_threads: HashMap<u32, HashMap<u32, usize>>,
    live: usize,
    dead_postings: usize,
    live_postings: usize,
    total_len: u64,
}

impl LexicalIndex {
    /// An empty index; `context_turns` or `context_weight` 0 scores every message on its own
    /// text only.
    pub fn new(
        tokenizer: Tokenizer,
        k1: f32,
        b: f32,
        context_turns: usize,
        context_weight: f32,
    ) -> Self {
        LexicalIndex {
            tokenizer,
            k1,
            b,
            context_turns,
            context_weight,
            terms: Names::default(),
            postings: Vec::new(),
            df: Vec::new(),
            docs: Vec::new(),
            slot_of: HashMap::new(),
            threads: Names::default(),
            resources: Names::default(),
            sequence: HashMap::new(),
            resource_threads: HashMap::new(),
            live: 0,
            dead_postings: 0,
            live_postings: 0,
            total_len: 0,
        }
    }

    /// Live documents.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    pub fn tokenizer(&self) -> Tokenizer {
        self.tokenizer
    }

    /// Add a message, or replace the one with this id; `order` places it in its thread
    /// (equal orders keep the order of upserts).
    pub fn upsert(
        &mut self,
        id: &str,
        thread: &str,
        resource: Option<&str>,
        order: i64,
        text: &str,
    ) {
        self.remove_one(id);
        let mut counts: HashMap<u32, u32> = HashMap::new();
        let tokens = self.tokenizer.tokens(text);
        for token in &tokens {
            let term = self.terms.intern(token);
            if term as usize == self.postings.len() {
                self.postings.push(Vec::new());
                self.df.push(0);
            }
            *counts.entry(term).or_insert(0) += 1;
        }
        let slot = self.docs.len() as u32;
        let thread = self.threads.intern(thread);
        let resource = resource.map_or(NO_RESOURCE, |r| self.resources.intern(r));
        let mut terms: Vec<(u32, u32)> = counts.into_iter().collect();
        terms.sort_unstable();
        for &(term, tf) in &terms {
            self.postings[term as usize].push(Posting {
                doc: slot,
                thread,
                resource,
                tf,
            });
            self.df[term as usize] += 1;
        }
        self.live_postings += terms.len();
        self.total_len += tokens.len() as u64;
        self.live += 1;
        *self
            .resource_threads
            .entry(resource)
            .or_default()
            .entry(thread)
            .or_default() += 1;
        let set = self.sequence.entry(thread).or_default();
        let key = (order, slot);
        let prev = set.range(..key).next_back().map_or(NO_DOC, |&(_, s)| s);
        let next = set.range(key..).next().map_or(NO_DOC, |&(_, s)| s);
        set.insert(key);
        self.link(prev, slot);
        self.link(slot, next);
        self.docs.push(Doc {
            id: id.to_string(),
            thread,
            resource,
            order,
            prev,
            next,
            len: tokens.len() as u32,
            terms,
            alive: true,
        });
        self.slot_of.insert(id.to_string(), slot);
        self.sweep_if_needed();
    }

    /// Remove messages by id; returns how many existed.
    pub fn remove<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) -> usize {
        let removed = ids.into_iter().filter(|id| self.remove_one(id)).count();
        self.sweep_if_needed();
        removed
    }

    /// Remove every message of a thread; returns how many there were.
    pub fn remove_thread(&mut self, thread: &str) -> usize {
        let Some(number) = self.threads.get(thread) else {
            return 0;
        };
        let ids: Vec<String> = self
            .docs
            .iter()
            .filter(|d| d.alive && d.thread == number)
            .map(|d| d.id.clone())
            .collect();
        self.remove(ids.iter().map(String::as_str))
    }

    fn remove_one(&mut self, id: &str) -> bool {
        let Some(slot) = self.slot_of.remove(id) else {
            return false;
        };
        let doc = &mut self.docs[slot as usize];
        doc.alive = false;
        if let Some(set) = self.sequence.get_mut(&doc.thread) {
            set.remove(&(doc.order, slot));
        }
        let (prev, next) = (doc.prev, doc.next);
        self.link(prev, next);
        let doc = &self.docs[slot as usize];
        for &(term, _) in &doc.terms {
            self.df[term as usize] -= 1;
        }
        if let Some(threads) = self.resource_threads.get_mut(&doc.resource) {
            if let Some(n) = threads.get_mut(&doc.thread) {
                *n -= 1;
                if *n == 0 {
                    threads.remove(&doc.thread);
                }
            }
            if threads.is_empty() {
                self.resource_threads.remove(&doc.resource);
            }
        }
        self.dead_postings += doc.terms.len();
        self.live_postings -= doc.terms.len();
        self.total_len -= doc.len as u64;
        self.live -= 1;
        true
    }

    /// Make `after` follow `before` in their thread (either may be `NO_DOC`; a slot equal to
    /// the number of documents is the one being added).
    fn link(&mut self, before: u32, after: u32) {
        if let Some(doc) = self.docs.get_mut(before as usize) {
            doc.next = after;
        }
        if let Some(doc) = self.docs.get_mut(after as usize) {
            doc.prev = before;
        }
    }

    /// Drop dead documents and their postings once they outnumber the live ones.
    fn sweep_if_needed(&mut self) {
        if self.dead_postings <= self.live_postings.max(1024) {
            return;
        }
        let mut new_slot = vec![u32::MAX; self.docs.len()];
        let mut docs = Vec::with_capacity(self.live);
        for (old, doc) in std::mem::take(&mut self.docs).into_iter().enumerate() {
            if doc.alive {
                new_slot[old] = docs.len() as u32;
                self.slot_of.insert(doc.id.clone(), docs.len() as u32);
                docs.push(doc);
            }
        }
        let remap = |slot: u32| new_slot.get(slot as usize).copied().unwrap_or(NO_DOC);
        for doc in &mut docs {
            doc.prev = remap(doc.prev);
            doc.next = remap(doc.next);
        }
        self.docs = docs;
        for set in self.sequence.values_mut() {
            *set = set
                .iter()
                .map(|&(order, old)| (order, new_slot[old as usize]))
                .collect();
        }
        self.sequence.retain(|_, set| !set.is_empty());
        for list in &mut self.postings {
            list.retain(|p| new_slot[p.doc as usize] != u32::MAX);
            for p in list.iter_mut() {
                p.doc = new_slot[p.doc as usize];
            }
        }
        self.dead_postings = 0;
    }

    /// Up to `n` live messages of `slot`'s thread right before it (nearest first) or after it.
    fn neighbours(&self, slot: u32, before: bool, n: usize) -> impl Iterator<Item = u32> + '_ {
        let step = move |s: &u32| {
            let doc = &self.docs[*s as usize];
            Some(if before { doc.prev } else { doc.next }).filter(|&s| s != NO_DOC)
        };
        std::iter::successors(step(&slot), step).take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::search::Walk;
    use super::*;

    const PLAIN: Tokenizer = Tokenizer {
        stem: false,
        stop_words: false,
    };

    /// BM25 by its definition (k1 1.2, b 0.75) over the texts of `(id, thread, resource,
    /// text)` rows, for one query.
    struct Oracle {
        docs: Vec<Vec<String>>,
        terms: Vec<String>,
        avg: f32,
    }

    impl Oracle {
        fn new(rows: &[(&str, &str, &str, &str)], query: &str) -> Oracle {
            let docs: Vec<Vec<String>> = rows.iter().map(|r| PLAIN.tokens(r.3)).collect();
            let avg = docs.iter().map(Vec::len).sum::<usize>() as f32 / docs.len() as f32;
            let mut terms = PLAIN.tokens(query);
            terms.sort();
            terms.dedup();
            Oracle { docs, terms, avg }
        }

        /// The score of `doc` (any token list) against an average length of `avg`.
        fn score(&self, doc: &[String], avg: f32) -> f32 {
            let (k1, b) = (1.2f32, 0.75f32);
            let n = self.docs.len() as f32;
            let mut score = 0.0f32;
            for term in &self.terms {
                let tf = doc.iter().filter(|t| *t == term).count() as f32;
                if tf > 0.0 {
                    let df = self.docs.iter().filter(|d| d.contains(term)).count() as f32;
                    let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                    score +=
                        idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * doc.len() as f32 / avg));
                }
            }
            score
        }
    }

    /// Rows with a positive score (idf is positive, so: sharing a query term), best first.
    fn ranked(scored: Vec<(String, f32)>) -> Vec<(String, f32)> {
        let mut out: Vec<(String, f32)> = scored.into_iter().filter(|r| r.1 > 0.0).collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out
    }

    /// BM25 from the definition, restricted to `scope`.
    fn naive(
        rows: &[(&str, &str, &str, &str)],
        query: &str,
        scope: Scope<'_>,
    ) -> Vec<(String, f32)> {
        let o = Oracle::new(rows, query);
        let in_scope = |row: &(&str, &str, &str, &str)| match scope {
            Scope::All => true,
            Scope::Thread(t) => row.1 == t,
            Scope::Resource(r) => row.2 == r,
        };
        ranked(
            rows.iter()
                .zip(&o.docs)
                .filter(|(row, _)| in_scope(row))
                .map(|(row, doc)| (row.0.to_string(), o.score(doc, o.avg)))
                .collect(),
        )
    }

    /// Upserts `(id, thread, resource, text)` rows, each row's position its order.
    fn upsert_in_order(index: &mut LexicalIndex, rows: &[(&str, &str, &str, &str)]) {
        for (i, row) in rows.iter().enumerate() {
            index.upsert(row.0, row.1, Some(row.2), i as i64, row.3);
        }
    }

    fn index_of(rows: &[(&str, &str, &str, &str)]) -> LexicalIndex {
        let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, 0, 0.0);
        for (id, thread, resource, text) in rows {
            index.upsert(id, thread, Some(resource), 0, text);
        }
        index
    }

    fn assert_same(got: &[(String, f32)], want: &[(String, f32)]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!((g.1 - w.1).abs() < 1e-4, "{got:?} vs {want:?}");
        }
        let mut g: Vec<&str> = got.iter().map(|x| x.0.as_str()).collect();
        let mut w: Vec<&str> = want.iter().map(|x| x.0.as_str()).collect();
        g.sort();
        w.sort();
        assert_eq!(g, w);
    }

    const ROWS: &[(&str, &str, &str, &str)] = &[
        ("m1", "t1", "r1", "I adopted a dog named Rex last week"),
        (
            "m2",
            "t1",
            "r1",
            "The dog loves the park, the park loves the dog",
        ),
        ("m3", "t2", "r1", "We went camping by the lake"),
        ("m4", "t3", "r2", "My cat hates the dog next door"),
        ("m5", "t3", "r2", "Pottery class on Tuesday was fun"),
        (
            "m6",
            "t4",
            "r2",
            "Camping trip to the mountains, then the lake again",
        ),
    ];

    #[test]
    fn scores_match_the_definition() {
        let index = index_of(ROWS);
        for query in [
            "dog",
            "the dog park",
            "camping lake",
            "pottery Tuesday",
            "nothing here",
        ] {
            for scope in [
                Scope::All,
                Scope::Resource("r1"),
                Scope::Resource("r2"),
                Scope::Thread("t3"),
            ] {
                for walk in [None, Some(Walk::Postings), Some(Walk::Documents)] {
                    let got = index.search_by(query, 10, scope, walk);
                    assert_same(&got, &naive(ROWS, query, scope));
                }
            }
        }
    }

    #[test]
    fn top_k_is_the_best_k_in_order() {
        let index = index_of(ROWS);
        let all = index.search("the dog lake camping", 10, Scope::All);
        let two = index.search("the dog lake camping", 2, Scope::All);
        assert_eq!(two, all[..2].to_vec());
        assert!(all.windows(2).all(|w| w[0].1 >= w[1].1));
    }

    #[test]
    fn unknown_scope_or_zero_k_returns_nothing() {
        let index = index_of(ROWS);
        assert!(index.search("dog", 5, Scope::Thread("nope")).is_empty());
        assert!(index.search("dog", 5, Scope::Resource("nope")).is_empty());
        assert!(index.search("dog", 0, Scope::All).is_empty());
    }

    #[test]
    fn removal_and_update_match_a_fresh_index() {
        let mut index = index_of(ROWS);
        assert_eq!(index.remove(["m2", "missing"]), 1);
        index.upsert("m3", "t2", Some("r1"), 0, "A dog at the lake");
        assert_eq!(index.remove_thread("t4"), 1);
        let expected: Vec<(&str, &str, &str, &str)> = vec![
            ROWS[0],
            ("m3", "t2", "r1", "A dog at the lake"),
            ROWS[3],
            ROWS[4],
        ];
        assert_eq!(index.len(), 4);
        for query in ["dog", "lake camping", "the"] {
            for scope in [
                Scope::All,
                Scope::Resource("r1"),
                Scope::Resource("r2"),
                Scope::Thread("t2"),
                Scope::Thread("t4"),
            ] {
                for walk in [Walk::Postings, Walk::Documents] {
                    let got = index.search_by(query, 10, scope, Some(walk));
                    assert_same(&got, &naive(&expected, query, scope));
                }
            }
        }
    }

    #[test]
    fn both_walks_agree_through_churn_and_sweeps() {
        let words = [
            "dog", "lake", "camping", "shelter", "noon", "beagle", "walk", "rex",
        ];
        let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, 2, 0.7);
        let mut state = 7u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        for step in 0..4000 {
            let id = format!("m{}", next(600));
            if next(5) == 0 {
                index.remove([id.as_str()]);
                continue;
            }
            let thread = format!("t{}", next(40));
            // A thread usually keeps its resource; now and then a message names another.
            let resource = format!(
                "r{}",
                (thread[1..].parse::<u64>().unwrap() + next(10) / 9) % 4
            );
            let text: Vec<&str> = (0..1 + next(6)).map(|_| words[next(8) as usize]).collect();
            index.upsert(&id, &thread, Some(&resource), step, &text.join(" "));
        }
        assert!(index.docs.len() < 3000, "sweeps ran"); // about 3,200 upserts
        for query in ["dog", "lake camping", "rex beagle walk", "noon"] {
            for scope in (0..4)
                .map(|r| format!("r{r}"))
                .chain((0..40).map(|t| format!("t{t}")))
            {
                let scope = if scope.starts_with('r') {
                    Scope::Resource(&scope)
                } else {
                    Scope::Thread(&scope)
                };
                assert_eq!(
                    index.search_by(query, 20, scope, Some(Walk::Postings)),
                    index.search_by(query, 20, scope, Some(Walk::Documents)),
                );
            }
        }
    }

    #[test]
    fn sweeping_dead_postings_keeps_results() {
        let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, 0, 0.0);
        for round in 0..50 {
            for i in 0..100 {
                let text = format!("word{} common round{round}", i % 7);
                index.upsert(&format!("m{i}"), "t", Some("r"), i, &text);
            }
        }
        assert_eq!(index.len(), 100);
        let hits = index.search("word3", 100, Scope::All);
        assert_eq!(hits.len(), (0..100).filter(|i| i % 7 == 3).count());
        // 300 live postings; without sweeping there would be 15,000.
        assert!(index.postings.iter().map(Vec::len).sum::<usize>() <= 300 + 1024 + 3);
    }

    /// `naive` plus `w` times BM25 of each row joined with the `turns` rows before it in its
    /// thread (rows are in thread order), against `turns + 1` times the average length.
    fn naive_in_context(
        rows: &[(&str, &str, &str, &str)],
        query: &str,
        turns: usize,
        w: f32,
    ) -> Vec<(String, f32)> {
        let o = Oracle::new(rows, query);
        let context_avg = (turns + 1) as f32 * o.avg;
        let scored = rows.iter().enumerate().map(|(i, row)| {
            let mut joined = o.docs[i].clone();
            let prior = (0..i).rev().filter(|&j| rows[j].1 == row.1).take(turns);
            prior.for_each(|j| joined.extend(o.docs[j].iter().cloned()));
            let score = o.score(&o.docs[i], o.avg) + w * o.score(&joined, context_avg);
            (row.0.to_string(), score)
        });
        ranked(scored.collect())
    }

    #[test]
    fn context_scores_match_the_definition() {
        let long: Vec<(&str, &str, &str, &str)> = vec![
            ("a1", "ta", "r", "we adopted a dog"),
            ("b1", "tb", "r", "the lake was cold"),
            ("a2", "ta", "r", "what kind of dog"),
            ("a3", "ta", "r", "a beagle from the shelter"),
            ("b2", "tb", "r", "camping by the lake again"),
            ("a4", "ta", "r", "shelter dogs are the best"),
            ("a5", "ta", "r", "we walk by the lake"),
        ];
        for rows in [ROWS, long.as_slice()] {
            for turns in [1, 2, 3] {
                let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, turns, 0.7);
                // Upserted out of order: the order argument decides each message's context.
                for (i, row) in rows.iter().enumerate().rev() {
                    index.upsert(row.0, row.1, Some(row.2), i as i64, row.3);
                }
                for query in [
                    "dog",
                    "camping lake",
                    "pottery Tuesday",
                    "shelter rex",
                    "nothing",
                ] {
                    let got = index.search(query, 10, Scope::All);
                    assert_same(&got, &naive_in_context(rows, query, turns, 0.7));
                }
            }
        }
        let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, 1, 0.7);
        upsert_in_order(&mut index, ROWS);
        // m2 follows m1 in t1, so "Rex" (only in m1) finds m2 through its context.
        let hits = index.search("rex", 10, Scope::Resource("r1"));
        assert_eq!(
            hits.iter().map(|h| h.0.as_str()).collect::<Vec<_>>(),
            ["m1", "m2"]
        );
    }

    #[test]
    fn removing_a_message_links_its_neighbours() {
        let rows = [
            ("a", "t", "r", "we adopted a puppy"),
            ("b", "t", "r", "what breed"),
            ("c", "t", "r", "a beagle"),
        ];
        let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, 1, 0.7);
        upsert_in_order(&mut index, &rows);
        let ids = |hits: Vec<(String, f32)>| hits.into_iter().map(|h| h.0).collect::<Vec<_>>();
        assert_eq!(ids(index.search("breed", 5, Scope::All)), ["b", "c"]);
        index.remove(["b"]);
        assert_eq!(ids(index.search("puppy", 5, Scope::All)), ["a", "c"]);
        assert!(index.search("breed", 5, Scope::All).is_empty());
        let expected = [rows[0], rows[2]];
        assert_same(
            &index.search("puppy beagle", 5, Scope::All),
            &naive_in_context(&expected, "puppy beagle", 1, 0.7),
        );
    }

    #[test]
    fn context_survives_churn_and_sweeps() {
        let rows = [
            ("a1", "ta", "r", "we adopted a dog"),
            ("a2", "ta", "r", "what kind of dog"),
            ("gone", "ta", "r", "lunch at noon"),
            ("a3", "ta", "r", "a beagle from the shelter"),
            ("a4", "ta", "r", "shelter dogs are the best"),
        ];
        let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, 2, 0.7);
        for round in 0..400 {
            upsert_in_order(&mut index, &rows);
            if round == 0 {
                index.upsert("other", "tb", Some("r"), 0, "noon lake walk");
            }
        }
        assert!(index.docs.len() < 400 * rows.len(), "sweeps ran");
        index.remove(["gone"]);
        let kept: Vec<_> = rows.iter().copied().filter(|r| r.0 != "gone").collect();
        let mut expected = kept.clone();
        expected.insert(0, ("other", "tb", "r", "noon lake walk"));
        for query in ["dog", "shelter", "beagle kind", "noon lunch"] {
            assert_same(
                &index.search(query, 10, Scope::All),
                &naive_in_context(&expected, query, 2, 0.7),
            );
        }
    }
}
