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
mod tests;
