//! The graph's link lists: level-0 lists in one contiguous block (`[count, n1, .., n_m0]` per
//! slot), upper-level lists only for the few slots that reach them.
//!
//! Lists are atomic words so that many threads can link vectors at once while others search:
//! a writer takes the slot's lock (one of a fixed set, shared by slots with the same
//! remainder; a thread never holds two), writes the entries, then the count. A reader that
//! meets a list mid-write sees a mix of old and new entries, every one of them a valid slot,
//! which a graph walk tolerates. Relaxed atomic loads and stores are plain moves on the
//! machines this runs on.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::vector::graph::NONE;

/// Locks shared by the slots: enough that two threads rarely want the same one.
const LOCKS: usize = 1024;

pub(crate) struct Adjacency {
    /// Links per upper-level list; level-0 lists hold twice as many.
    m: usize,
    level0: Vec<AtomicU32>,
    /// Per slot, levels 1..=level, each `[count, n1, .., n_m]`; empty for level-0 slots.
    upper: Vec<Box<[AtomicU32]>>,
    /// Per slot, how many level-0 lists hold it: pruning never drops a slot's last one.
    indegree: Vec<AtomicU32>,
    /// Per slot, the slot whose level-0 list holds it for good (`NONE`: none yet). Following
    /// these links backwards from the entry point reaches every slot (see `insert`).
    parent: Vec<AtomicU32>,
    /// Per slot, how many slots it is the parent of.
    children: Vec<AtomicU32>,
    /// Per slot, whether its lists or parent changed since the last save (which appends only
    /// the slots that changed).
    touched: Vec<AtomicBool>,
    locks: Box<[Mutex<()>]>,
}

fn atomics(words: impl IntoIterator<Item = u32>) -> impl Iterator<Item = AtomicU32> {
    words.into_iter().map(AtomicU32::new)
}

impl Adjacency {
    pub(crate) fn new(m: usize) -> Adjacency {
        Adjacency {
            m,
            level0: Vec::new(),
            upper: Vec::new(),
            indegree: Vec::new(),
            parent: Vec::new(),
            children: Vec::new(),
            touched: Vec::new(),
            locks: (0..LOCKS).map(|_| Mutex::new(())).collect(),
        }
    }

    /// From saved words: `level0` as one block, `upper` per slot.
    pub(crate) fn from_words(
        m: usize,
        level0: Vec<u32>,
        upper: Vec<Vec<u32>>,
        parent: Vec<u32>,
    ) -> Adjacency {
        let mut a = Adjacency::new(m);
        a.level0 = atomics(level0).collect();
        a.upper = upper.into_iter().map(|u| atomics(u).collect()).collect();
        a.indegree = atomics(std::iter::repeat_n(0, a.upper.len())).collect();
        let n = a.upper.len() as u32;
        a.children = atomics(std::iter::repeat_n(0, a.upper.len())).collect();
        for &p in &parent {
            if p < n {
                a.children[p as usize].fetch_add(1, Relaxed);
            }
        }
        a.parent = atomics(parent).collect();
        a.touched = (0..n).map(|_| AtomicBool::new(false)).collect();
        for slot in 0..n {
            a.list(slot, 0)
                .filter(|&x| x < n)
                .for_each(|x| a.indegree[x as usize].store(a.indegree(x) + 1, Relaxed));
        }
        a
    }

    #[inline]
    pub(crate) fn m0(&self) -> usize {
        self.m * 2
    }

    pub(crate) fn slots(&self) -> usize {
        self.upper.len()
    }

    /// Makes room for `additional` more slots (exactly, or with the usual doubling).
    pub(crate) fn reserve(&mut self, additional: usize, exact: bool) {
        let width = self.m0() + 1;
        if exact {
            self.level0.reserve_exact(additional * width);
            self.upper.reserve_exact(additional);
            self.indegree.reserve_exact(additional);
            self.parent.reserve_exact(additional);
            self.children.reserve_exact(additional);
            self.touched.reserve_exact(additional);
        } else {
            self.level0.reserve(additional * width);
            self.upper.reserve(additional);
            self.indegree.reserve(additional);
            self.parent.reserve(additional);
            self.children.reserve(additional);
            self.touched.reserve(additional);
        }
    }

    /// Appends an unlinked slot reaching `level`.
    pub(crate) fn push(&mut self, level: usize) {
        let width = self.m0() + 1;
        self.level0.extend(atomics(std::iter::repeat_n(0, width)));
        self.upper
            .push(atomics(std::iter::repeat_n(0, level * (self.m + 1))).collect());
        self.indegree.push(AtomicU32::new(0));
        self.parent.push(AtomicU32::new(NONE));
        self.children.push(AtomicU32::new(0));
        self.touched.push(AtomicBool::new(true));
    }

    /// `[count, n1, .., n_cap]` of `slot` at `level`.
    #[inline]
    pub(crate) fn block(&self, slot: u32, level: usize) -> &[AtomicU32] {
        if level == 0 {
            let w = self.m0() + 1;
            &self.level0[slot as usize * w..(slot as usize + 1) * w]
        } else {
            let w = self.m + 1;
            &self.upper[slot as usize][(level - 1) * w..level * w]
        }
    }

    /// The links of `slot` at `level`.
    #[inline]
    pub(crate) fn list(&self, slot: u32, level: usize) -> impl Iterator<Item = u32> + '_ {
        let block = self.block(slot, level);
        let count = (block[0].load(Relaxed) as usize).min(block.len() - 1);
        block[1..1 + count].iter().map(|x| x.load(Relaxed))
    }

    pub(crate) fn contains(&self, slot: u32, level: usize, other: u32) -> bool {
        self.list(slot, level).any(|x| x == other)
    }

    /// How many level-0 lists hold `slot`.
    #[inline]
    pub(crate) fn indegree(&self, slot: u32) -> u32 {
        self.indegree[slot as usize].load(Relaxed)
    }

    #[inline]
    pub(crate) fn parent(&self, slot: u32) -> u32 {
        self.parent[slot as usize].load(SeqCst)
    }

    pub(crate) fn children(&self, slot: u32) -> u32 {
        self.children[slot as usize].load(Relaxed)
    }

    /// Makes `parent` the holder of `slot` for good (the caller puts it in its list).
    pub(crate) fn set_parent(&self, slot: u32, parent: u32) {
        let old = self.parent[slot as usize].swap(parent, SeqCst);
        if old != NONE && old != slot {
            self.children[old as usize].fetch_sub(1, Relaxed);
        }
        if parent != slot {
            self.children[parent as usize].fetch_add(1, Relaxed);
        }
        self.touched[slot as usize].store(true, Relaxed);
    }

    /// Whether `slot`'s lists or parent changed since [`Adjacency::untouch`]; clears the mark.
    pub(crate) fn untouch(&self, slot: u32) -> bool {
        self.touched[slot as usize].swap(false, Relaxed)
    }

    /// Every word of `slot`'s lists: its level-0 block, then its upper levels.
    pub(crate) fn slot_words(&self, slot: u32) -> impl Iterator<Item = u32> + '_ {
        let w = self.m0() + 1;
        self.level0[slot as usize * w..(slot as usize + 1) * w]
            .iter()
            .chain(self.upper[slot as usize].iter())
            .map(|x| x.load(Relaxed))
    }

    /// Replaces the links of `slot` at `level` (at most the level's capacity); the caller
    /// holds the slot's [`Adjacency::lock`] when other threads may write too.
    pub(crate) fn set(&self, slot: u32, level: usize, links: &[u32]) {
        let block = self.block(slot, level);
        if level == 0 {
            for x in self.list(slot, 0) {
                self.indegree[x as usize].fetch_sub(1, Relaxed);
            }
            for &x in links.iter().take(block.len() - 1) {
                self.indegree[x as usize].fetch_add(1, Relaxed);
            }
        }
        for (cell, &x) in block[1..].iter().zip(links) {
            cell.store(x, Relaxed);
        }
        block[0].store(links.len().min(block.len() - 1) as u32, Relaxed);
        self.touched[slot as usize].store(true, Relaxed);
    }

    /// The lock guarding the lists of `slot` while a thread rewrites them.
    pub(crate) fn lock(&self, slot: u32) -> MutexGuard<'_, ()> {
        self.locks[slot as usize % LOCKS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The level-0 block as words, for comparing.
    #[cfg(test)]
    pub(crate) fn level0_words(&self) -> impl Iterator<Item = u32> + '_ {
        self.level0.iter().map(|x| x.load(Relaxed))
    }

    /// Words held by the upper lists of `slot`.
    pub(crate) fn upper_len(&self, slot: usize) -> usize {
        self.upper[slot].len()
    }

    /// Bytes held (a 16-byte allocator overhead per upper list).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.level0.capacity() * 4
            + (self.indegree.capacity() + self.parent.capacity() + self.children.capacity()) * 4
            + self.touched.capacity()
            + self.upper.capacity() * 16
            + self
                .upper
                .iter()
                .map(|u| if u.is_empty() { 0 } else { u.len() * 4 + 16 })
                .sum::<usize>()
    }

    /// The level-0 block's memory, for huge-page advice.
    pub(crate) fn level0_buffer(&self) -> &Vec<AtomicU32> {
        &self.level0
    }
}
