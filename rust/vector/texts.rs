//! The metadata text of each slot: the JSON its database row holds, packed in one arena, so
//! a query hands every hit its metadata exactly as stored without reading the database.
//!
//! A slot written without its text (metadata given as values only, or loaded from an index
//! file that predates the texts) holds none until [`Texts::fill`] gives it one; a valid JSON
//! text is never empty, so an empty span means none.

/// Texts by slot, in one arena.
#[derive(Debug)]
pub struct Texts {
    bytes: Vec<u8>,
    /// Where each slot's text starts in `bytes`; one more than there are slots.
    starts: Vec<u64>,
}

impl Default for Texts {
    fn default() -> Texts {
        Texts {
            bytes: Vec::new(),
            starts: vec![0],
        }
    }
}

impl Texts {
    /// Slots held.
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes room for `slots` more slots whose texts take `bytes` bytes in all: exactly for
    /// a large batch (doubling would leave a quarter of the arena unused on average), with the
    /// usual doubling for small ones (so many small batches stay linear).
    pub fn reserve(&mut self, slots: usize, bytes: usize) {
        if slots >= self.len() / 4 {
            self.starts.reserve_exact(slots);
            self.bytes.reserve_exact(bytes);
        } else {
            self.starts.reserve(slots);
            self.bytes.reserve(bytes);
        }
    }

    /// Appends the text of the next slot.
    pub fn push(&mut self, text: Option<&str>) {
        self.bytes.extend_from_slice(text.unwrap_or("").as_bytes());
        self.starts.push(self.bytes.len() as u64);
    }

    /// The text of `slot`, if it has one.
    #[inline]
    pub fn get(&self, slot: u32) -> Option<&str> {
        let (from, to) = (self.starts[slot as usize], self.starts[slot as usize + 1]);
        let bytes = &self.bytes[from as usize..to as usize];
        // SAFETY: written whole from `&str`s by `push`, so valid UTF-8.
        (!bytes.is_empty()).then(|| unsafe { std::str::from_utf8_unchecked(bytes) })
    }

    /// Gives the slots without a text the one `text_of` has for them, if any.
    pub fn fill<'a>(&mut self, mut text_of: impl FnMut(u32) -> Option<&'a str>) {
        let mut filled = Texts::default();
        let texts: Vec<Option<&str>> = (0..self.len() as u32)
            .map(|slot| self.get(slot).or_else(|| text_of(slot)))
            .collect();
        filled.reserve(texts.len(), texts.iter().flatten().map(|t| t.len()).sum());
        texts.into_iter().for_each(|t| filled.push(t));
        *self = filled;
    }

    /// Heap bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.bytes.capacity() + self.starts.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_kept_by_slot_and_a_missing_one_can_be_filled_later() {
        let mut t = Texts::default();
        t.push(Some(r#"{"a": 1}"#));
        t.push(None);
        t.push(Some("{}"));
        t.push(None);
        assert_eq!(t.len(), 4);
        assert_eq!(
            (0..4).map(|s| t.get(s)).collect::<Vec<_>>(),
            [Some(r#"{"a": 1}"#), None, Some("{}"), None]
        );
        // Filling leaves the texts held alone and gives only the missing ones.
        t.fill(|s| {
            ["x", r#"{"b": "é"}"#, "y", "z"]
                .get(s as usize)
                .copied()
                .filter(|_| s != 3)
        });
        assert_eq!(
            (0..4).map(|s| t.get(s)).collect::<Vec<_>>(),
            [Some(r#"{"a": 1}"#), Some(r#"{"b": "é"}"#), Some("{}"), None]
        );
    }
}
