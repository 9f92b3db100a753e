//! The index files, and the only place the core touches the filesystem.
//!
//! An index is saved as two files: the index file (`<name>.hnsw`) with everything but the
//! float vectors, and the vectors file beside it (`<name>.vectors`, see [`originals`]), which
//! the index reads its float vectors from once loaded. Both only grow between compactions:
//! a save appends what changed since the last one.
//!
//! The index file is a header and a sequence of frames, each the changes of one save:
//! `magic (8) | version u32 | dim u32 | metric u8 | m u32 | ef_construction u32 | seed u64 |
//! origin (str) | vectors file id (16) | checksum u64`, then frames of
//! `length u64 | payload | checksum u64 of the payload`. A payload holds the generation, rng,
//! entry point and slot count after the save, then per new slot its level, codes and their
//! error terms, id, metadata record, parent, tombstone and lists; then each older slot whose
//! lists or parent changed (slot, parent, lists), the older slots deleted, the queue of
//! slots waiting to be linked, the default search breadths measured so far (`k`, linked
//! slots, breadth, whether on served queries; see `breadth`), and last the new slots'
//! metadata texts (see `texts`; empty for none) followed by their length in bytes, so a load
//! finds them from the frame's end. The first frame holds every slot. All little-endian.
//!
//! A load copies each array once out of the file's bytes (mapped for the load only), into
//! memory allocated at its final size. (Searches never read the mapping: a file rewritten in
//! place by another program would fault the process.)
//!
//! A save first writes the vectors of its new slots and syncs them, then appends its frame
//! and syncs it: a crash before the end of the frame leaves a frame that fails its checksum,
//! and a load trusts the frames before it (an earlier generation, which the caller catches up
//! from the database). A full save (the first, or after a compaction, or when the files are
//! not the ones this index last wrote) writes both files under temporary names and renames
//! them over the old ones, vectors file first. The vectors file carries a random id the index
//! file names, and the origin: a load refuses a vectors file of another index or origin, one
//! shorter than the rows it needs, or one whose rows disagree with the saved codes.

pub mod codec;
mod load;
pub mod originals;

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{CoreError, Result};
use crate::vector::breadth::DEFAULT_K;
use crate::vector::graph::{Graph, Params};
use crate::vector::plan::EF_DEFAULT;
use crate::vector::VectorIndex;
use codec::{checksum, Writer};
pub use load::load;
use originals::Backing;

const MAGIC: &[u8; 8] = b"TRHNSW\x00\x01";
pub const FORMAT_VERSION: u32 = 8;
/// The previous version, read too (it holds no metadata texts: its slots have none until the
/// store fills them in); the next save of an index loaded from one rewrites both files in the
/// current version.
const PREVIOUS_VERSION: u32 = 7;
/// Rows a load re-quantises to check the vectors file against the saved codes, spread over
/// the index (every row of the last frame counts too, up to this many).
const CHECKED_ROWS: usize = 256;

/// The vectors file that goes with the index file at `path`.
pub fn vectors_path(path: &Path) -> PathBuf {
    path.with_extension("vectors")
}

/// What an index knows of its files: where and what it last saved, and what changed since.
#[derive(Default)]
pub struct Journal {
    saved: Option<Saved>,
    /// Slots deleted since the last save.
    pub(crate) removed: Vec<u32>,
}

struct Saved {
    path: PathBuf,
    origin: Box<str>,
    vectors: u128,
    slots: usize,
    /// The index file's length after the save.
    len: u64,
    /// The count of breadth measures the save wrote (see `breadth`).
    breadths: u64,
}

/// What [`save`] did, for [`finish`].
pub struct Written {
    /// Vectors the file holds as waiting to be linked.
    pub pending: usize,
    /// After a full save: the new vectors file, to read the vectors from from now on.
    adopt: Option<(Backing, usize)>,
}

/// Saves `index` to `path`, tagged with the database `generation` it reflects and the
/// `origin` of the index in that database (which database, which creation of it): appends
/// what changed since the last save when the files are the ones it last wrote, else writes
/// both files anew. Call [`finish`] afterwards under a write hold of the index.
pub fn save(index: &VectorIndex, path: &Path, generation: u64, origin: &str) -> Result<Written> {
    let g = &index.graph;
    // The default breadth, measured now if it is not yet (or no longer): the file keeps it,
    // so a reopened index answers its first search without measuring.
    g.default_ef(DEFAULT_K, EF_DEFAULT, None);
    let finished = g.linking.lock().unwrap_or_else(|e| e.into_inner()); // no half-linked batch
    let queue = waiting(g, &finished);
    let mut journal = index.journal.lock().unwrap_or_else(|e| e.into_inner());
    let appendable = journal.saved.as_ref().is_some_and(|s| {
        s.path == path
            && &*s.origin == origin
            && s.slots <= g.slots()
            && g.originals.backing().is_some_and(|b| b.id == s.vectors)
            && fs::metadata(path).is_ok_and(|m| m.len() == s.len)
    });
    let pending = queue.iter().filter(|&&s| !g.is_deleted(s)).count();
    if appendable {
        let result = append(index, &mut journal, path, generation, &queue);
        if result.is_err() {
            journal.saved = None; // what changed was taken: the next save writes everything
        }
        return result.map(|()| Written {
            pending,
            adopt: None,
        });
    }
    journal.saved = None;
    let backing = write_full(index, &mut journal, path, generation, origin, &queue)?;
    Ok(Written {
        pending,
        adopt: Some((backing, g.slots())),
    })
}

/// Completes a [`save`]: after a full save the index reads its vectors from the new file
/// (rows added meanwhile are copied there first), unless a compaction replaced them.
pub fn finish(index: &mut VectorIndex, written: Written) -> Result<()> {
    let Some((backing, copied)) = written.adopt else {
        return Ok(());
    };
    let journal = index.journal.get_mut().unwrap_or_else(|e| e.into_inner());
    if journal
        .saved
        .as_ref()
        .is_none_or(|s| s.vectors != backing.id)
    {
        return Ok(()); // compacted since: the next save writes everything again
    }
    let originals = &mut index.graph.originals;
    originals.copy_rows(&backing, copied)?;
    originals.adopt(backing);
    Ok(())
}

/// Whether a save would write more than the database changes and linking since the last:
/// a breadth measured since, or a file of the previous version (or none yet).
pub fn outdated(index: &VectorIndex) -> bool {
    let journal = index.journal.lock().unwrap_or_else(|e| e.into_inner());
    journal
        .saved
        .as_ref()
        .is_none_or(|s| s.breadths != index.graph.measured_breadths().1)
}

/// The waiting queue as a save records it: the slots a parallel link `finished` are linked,
/// though they stay queued until the index is next written to.
fn waiting(g: &Graph, finished: &[u32]) -> Vec<u32> {
    let finished: HashSet<u32> = finished.iter().copied().collect();
    g.pending
        .iter()
        .copied()
        .filter(|s| !finished.contains(s))
        .collect()
}

fn append(
    index: &VectorIndex,
    journal: &mut Journal,
    path: &Path,
    generation: u64,
    queue: &[u32],
) -> Result<()> {
    let g = &index.graph;
    let Some(first) = journal.saved.as_ref().map(|s| s.slots) else {
        return Ok(());
    };
    // The new slots' vectors first: a frame never names rows the disk may lack.
    if let Some(b) = g.originals.backing() {
        g.originals.copy_rows(b, g.originals.stored())?;
    }
    g.originals.sync()?;
    let (bytes, breadths) = frame(index, first, generation, &journal.removed, queue);
    let mut file = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| io_error("open", path, e))?;
    file.write_all(&bytes)
        .and_then(|()| file.sync_data())
        .map_err(|e| io_error("write", path, e))?;
    if let Some(saved) = journal.saved.as_mut() {
        saved.slots = g.slots();
        saved.len += bytes.len() as u64;
        saved.breadths = breadths;
    }
    journal.removed.clear();
    Ok(())
}

fn write_full(
    index: &VectorIndex,
    journal: &mut Journal,
    path: &Path,
    generation: u64,
    origin: &str,
    queue: &[u32],
) -> Result<Backing> {
    let g = &index.graph;
    let target = vectors_path(path);
    let staging = temporary(&target);
    let mut backing = Backing::create(&staging, g.params().dim, origin)?;
    let copied = g
        .originals
        .copy_rows(&backing, 0)
        .and_then(|()| backing.rename(&target));
    if let Err(e) = copied {
        let _ = fs::remove_file(&staging);
        return Err(e);
    }
    let mut bytes = header(g.params(), origin, backing.id);
    let (first_frame, breadths) = frame(index, 0, generation, &[], queue);
    bytes.extend_from_slice(&first_frame);
    write(path, &bytes)?;
    journal.removed.clear();
    journal.saved = Some(Saved {
        path: path.to_path_buf(),
        origin: origin.into(),
        vectors: backing.id,
        slots: g.slots(),
        len: bytes.len() as u64,
        breadths,
    });
    Ok(backing)
}

fn temporary(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Writes `bytes` to `path` atomically: to a temporary file, synced, then renamed. A failed
/// write leaves neither file behind.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temporary(path);
    let written = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    written.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_error("write", path, e)
    })
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> CoreError {
    CoreError::Io(format!("cannot {what} {}: {e}", path.display()))
}

fn header(p: &Params, origin: &str, vectors: u128) -> Vec<u8> {
    let mut w = Writer::new();
    w.bytes(MAGIC);
    w.u32(FORMAT_VERSION);
    w.u32(p.dim as u32);
    w.u8(p.metric.code());
    w.u32(p.m as u32);
    w.u32(p.ef_construction as u32);
    w.u64(p.seed);
    w.str(origin);
    w.u128(vectors);
    let sum = checksum(w.as_bytes());
    w.u64(sum);
    w.into_bytes()
}

/// One frame: the slots from `first` on, the older slots whose lists changed since the last
/// save (their marks are cleared), the older ones in `removed`, the queue, and the measured
/// breadths. Returns it and the count of breadth measures it holds.
fn frame(
    index: &VectorIndex,
    first: usize,
    generation: u64,
    removed: &[u32],
    queue: &[u32],
) -> (Vec<u8>, u64) {
    let g = &index.graph;
    let (n, dim) = (g.slots(), g.params().dim);
    let new = n - first;
    let width = 2 * g.params().m + 1;
    let mut w = Writer::with_capacity(64 + new * (dim + 17 + width * 4 + 4 + 32));
    w.u64(0); // the payload's length, once known
    w.u64(generation);
    w.u64(g.rng);
    w.u32(g.entry());
    w.u64(first as u64);
    w.u64(n as u64);
    w.bytes(&g.levels[first..]);
    for run in g.codes.runs_from(first * dim) {
        w.i8s(run);
    }
    let c = &g.codes;
    for terms in [&c.scales, &c.norms, &c.residuals, &c.norm_gaps] {
        w.words(&terms[first..]);
    }
    w.words(&g.originals.sums[first..]);
    for slot in first as u32..n as u32 {
        w.str(index.ids.get(slot));
    }
    for slot in first as u32..n as u32 {
        let record = index.records.get(slot);
        w.u32(record.iter().count() as u32);
        for (key, value) in record.iter() {
            w.str(key);
            w.value(value);
        }
    }
    for slot in first as u32..n as u32 {
        w.u32(g.links.parent(slot));
    }
    w.bytes(
        &g.deleted[first..]
            .iter()
            .map(|&d| d as u8)
            .collect::<Vec<_>>(),
    );
    for slot in first as u32..n as u32 {
        g.links.untouch(slot);
        g.links.slot_words(slot).for_each(|x| w.u32(x));
    }
    let touched: Vec<u32> = (0..first as u32).filter(|&s| g.links.untouch(s)).collect();
    w.u64(touched.len() as u64);
    for &slot in &touched {
        w.u32(slot);
        w.u32(g.links.parent(slot));
        g.links.slot_words(slot).for_each(|x| w.u32(x));
    }
    let mut gone: Vec<u32> = removed
        .iter()
        .copied()
        .filter(|&s| (s as usize) < first)
        .collect();
    gone.sort_unstable();
    gone.dedup();
    w.u64(gone.len() as u64);
    w.words(&gone);
    w.u64(queue.len() as u64);
    queue.iter().for_each(|&s| w.u32(s));
    let (breadths, measures) = g.measured_breadths();
    w.u64(breadths.len() as u64);
    breadths.iter().flatten().for_each(|&x| w.u64(x));
    let texts = w.len();
    for slot in first as u32..n as u32 {
        w.str(index.texts.get(slot).unwrap_or(""));
    }
    w.u64((w.len() - texts) as u64);
    let len = w.len() - 8;
    w.put_u64(0, len as u64);
    let sum = checksum(&w.as_bytes()[8..]);
    w.u64(sum);
    (w.into_bytes(), measures)
}

#[cfg(test)]
mod tests;
