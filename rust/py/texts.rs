//! The metadata texts of recently written or returned vectors, kept by slot beside the index
//! so a query hands each hit its text without hashing its id.

use std::collections::VecDeque;

use pyo3::prelude::*;
use pyo3::types::PyString;

/// Texts by slot, at most `limit` of them (the oldest remembered go first), for one slot
/// numbering of the index: a new numbering (a compaction) forgets them all.
#[derive(Default)]
pub(crate) struct SlotTexts {
    numbering: u64,
    by_slot: Vec<Option<Py<PyString>>>,
    /// Slots in the order their texts were remembered.
    order: VecDeque<u32>,
    held: usize,
}

impl SlotTexts {
    /// Keeps `text` for `slot` of `numbering`, then drops the oldest past `limit`.
    pub(crate) fn remember(&mut self, numbering: u64, slot: u32, text: Py<PyString>, limit: usize) {
        if numbering != self.numbering {
            *self = SlotTexts {
                numbering,
                ..SlotTexts::default()
            };
        }
        let at = slot as usize;
        if self.by_slot.len() <= at {
            self.by_slot.resize_with(at + 1, || None);
        }
        if self.by_slot[at].replace(text).is_none() {
            self.held += 1;
            self.order.push_back(slot);
        }
        while self.held > limit {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if self.by_slot[old as usize].take().is_some() {
                self.held -= 1;
            }
        }
    }

    /// The text kept for `slot` of `numbering`.
    pub(crate) fn get<'py>(
        &self,
        py: Python<'py>,
        numbering: u64,
        slot: u32,
    ) -> Option<Bound<'py, PyString>> {
        if numbering != self.numbering {
            return None;
        }
        let text = self.by_slot.get(slot as usize)?.as_ref()?;
        Some(text.bind(py).clone())
    }

    /// Forgets the text of `slot` of `numbering`.
    pub(crate) fn forget(&mut self, numbering: u64, slot: u32) {
        if numbering == self.numbering {
            if let Some(held) = self.by_slot.get_mut(slot as usize) {
                if held.take().is_some() {
                    self.held -= 1;
                }
            }
        }
    }

    /// How many texts are kept.
    pub(crate) fn len(&self) -> usize {
        self.held
    }
}
