//! Reading an index file back: its header, then its frames in order, each applied to arrays
//! allocated once at their final size, then the vectors file beside it opened and checked.

use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use super::codec::{checksum, corrupt, Reader};
use super::originals::{self, Backing, Originals};
use super::{
    io_error, vectors_path, Journal, Saved, CHECKED_ROWS, FORMAT_VERSION, MAGIC, PREVIOUS_VERSION,
};
use crate::distance::Metric;
use crate::error::Result;
use crate::vector::adjacency::Adjacency;
use crate::vector::breadth;
use crate::vector::codes::Codes;
use crate::vector::graph::{Graph, Params, NONE};
use crate::vector::ids::Ids;
use crate::vector::postings::Postings;
use crate::vector::records::RecordTable;
use crate::vector::texts::Texts;
use crate::vector::VectorIndex;

/// Reads the index file at `path` and opens its vectors file; anything truncated, foreign or
/// of another version is `IndexCorrupt` (a damaged or incomplete last frame only takes the
/// index back to the save before it). Returns the index and the generation and origin of the
/// last complete save.
pub fn load(path: &Path) -> Result<(VectorIndex, u64, Box<str>)> {
    let file = Mapped::open(path).map_err(|e| io_error("read", path, e))?;
    let bytes = file.bytes();
    let (params, version, origin, vectors, start) = read_header(bytes)?;
    let frames = frames(bytes, start);
    // The frames are decoded while their checksums are summed. One that fails its checksum
    // ends the index at the frame before it: then (rarely: after a save cut short) the
    // frames before it are decoded again, by themselves.
    let (intact, decoded) = decode(params, version, &frames);
    let (mut state, (generation, last_first)) = if intact == frames.len() {
        decoded?
    } else {
        drop(decoded);
        decode(params, version, &frames[..intact]).1?
    };
    let at = frames[..intact].last().map_or(start, |f| f.end);
    let slots = state.levels.len();
    // Unmapped while no other thread of the process runs: no other processor's TLB to flush.
    drop(file);
    let codes = std::mem::take(&mut state.codes);
    let backing = Backing::open(&vectors_path(path), params.dim, vectors, &origin, slots)?;
    let originals = Originals::over(params.dim, backing, std::mem::take(&mut state.sums))?;
    check_rows(&originals, last_first)?;
    let records = std::mem::take(&mut state.records);
    // The slot lists are built beside the rest (they need only the records and tombstones).
    let (graph, ids, postings) = std::thread::scope(|scope| {
        let deleted = state.deleted.clone();
        let records = &records;
        let postings = scope.spawn(move || {
            let live = (0..deleted.len() as u32).filter(|&s| !deleted[s as usize]);
            Postings::of_records(records, live)
        });
        let graph = Graph::from_parts(
            params,
            state.rng,
            originals,
            codes,
            state.levels,
            Adjacency::from_words(params.m, state.level0, state.upper, state.parents),
            state.deleted,
            state.entry,
            state.pending.into(),
        );
        graph.validate().map_err(|e| corrupt(&e))?;
        graph.restore_breadths(&state.breadths);
        let ids = state.ids;
        let postings = postings
            .join()
            .map_err(|_| corrupt("the metadata could not be read"))?;
        Ok((graph, ids, postings))
    })?;
    let index = VectorIndex::assemble(graph, ids, records, state.texts, postings);
    // A file of the previous version is not appended to: the next save writes both anew.
    let saved = (version == FORMAT_VERSION).then(|| Saved {
        path: path.to_path_buf(),
        origin: origin.clone(),
        vectors,
        slots,
        len: at as u64,
        breadths: index.graph.measured_breadths().1,
    });
    *index.journal.lock().unwrap_or_else(|e| e.into_inner()) = Journal {
        saved,
        removed: Vec::new(),
    };
    Ok((index, generation, origin))
}

pub(super) fn read_header(bytes: &[u8]) -> Result<(Params, u32, Box<str>, u128, usize)> {
    if bytes.len() < MAGIC.len() + 4 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(corrupt("not a threadrecall index file"));
    }
    let mut r = Reader::new(bytes, MAGIC.len());
    let version = r.u32()?;
    if version != FORMAT_VERSION && version != PREVIOUS_VERSION {
        return Err(corrupt(&format!(
            "format version {version}, expected {FORMAT_VERSION}"
        )));
    }
    let dim = r.u32()? as usize;
    let metric = Metric::from_code(r.u8()?).ok_or_else(|| corrupt("unknown metric"))?;
    let (m, ef_construction) = (r.u32()? as usize, r.u32()? as usize);
    let seed = r.u64()?;
    let origin = r.str()?;
    let vectors = r.u128()?;
    let end = r.at();
    if r.u64()? != checksum(&bytes[..end]) {
        return Err(corrupt("damaged header"));
    }
    let params = Params::new(dim, metric, m, ef_construction, seed)
        .map_err(|_| corrupt("bad parameters"))?;
    Ok((params, version, origin, vectors, r.at()))
}

/// A frame of an index file: its payload, the checksum saved with it, and where the next
/// frame begins.
struct Frame<'a> {
    payload: &'a [u8],
    sum: u64,
    end: usize,
}

impl<'a> Frame<'a> {
    /// The payload but its metadata texts, and those texts (none before the current version).
    fn parts(&self, version: u32) -> Result<(&'a [u8], &'a [u8])> {
        let p = self.payload;
        if version != FORMAT_VERSION {
            return Ok((p, &[]));
        }
        let tail = p.len().checked_sub(8).ok_or_else(|| corrupt("bad texts"))?;
        let len = Reader::new(p, tail).count()?;
        let at = tail.checked_sub(len).ok_or_else(|| corrupt("bad texts"))?;
        Ok((&p[..at], &p[at..tail]))
    }
}

/// The frames from `at` on, up to the end of the file or the first frame it cuts short.
fn frames(bytes: &[u8], mut at: usize) -> Vec<Frame<'_>> {
    let mut frames = Vec::new();
    loop {
        let mut r = Reader::new(bytes, at);
        let Ok(len) = r.count() else { break };
        let (Ok(payload), Ok(sum)) = (r.take(len), r.u64()) else {
            break;
        };
        at = r.at();
        frames.push(Frame {
            payload,
            sum,
            end: at,
        });
    }
    frames
}

/// The bytes a payload opens with: generation, rng, entry point, first slot and slot count.
const COUNTS: usize = 8 + 8 + 4 + 8 + 8;

/// What a frame's payload opens with.
struct Counts {
    generation: u64,
    rng: u64,
    entry: u32,
    first: usize,
    new: usize,
}

impl Counts {
    /// The counts of each frame in turn. Every new slot takes at least its codes and level-0
    /// block: no count past what its payload can hold is believed (nor reserved for), so the
    /// slots of all the frames together are bounded by the file's length.
    fn of(params: Params, frames: &[Frame]) -> Result<Vec<Counts>> {
        let least = params.dim + 4 * (2 * params.m + 1);
        let mut slots = 0;
        frames
            .iter()
            .map(|frame| {
                let mut r = Reader::new(frame.payload, 0);
                let (generation, rng, entry) = (r.u64()?, r.u64()?, r.u32()?);
                let (first, end) = (r.count()?, r.count()?);
                if first != slots || end < first {
                    return Err(corrupt("frames out of order"));
                }
                let new = end - first;
                if new
                    .checked_mul(least)
                    .is_none_or(|bytes| bytes > frame.payload.len())
                {
                    return Err(corrupt("bad count"));
                }
                slots = end;
                Ok(Counts {
                    generation,
                    rng,
                    entry,
                    first,
                    new,
                })
            })
            .collect()
    }
}

/// What frames decode to: the arrays, and the generation and first new slot of the last frame.
type Decoded = (Loaded, (u64, usize));

/// The arrays `frames` rebuild, with the generation and first new slot of the last one
/// (none: no complete save); and how many frames, from the first, pass their checksums.
///
/// Two threads share the work. One copies the codes, their error terms and the vectors'
/// checksums, which lie where a frame's counts put them. The other reads the rest, each part
/// found only by reading what comes before it: the new slots' ids and records frame by
/// frame, then the lists last frame first, so that each slot's lists are copied once, from
/// the last frame that has them, however many saves changed them; then it makes the live
/// ids findable. Each then sums the checksums of the frames the other has not taken yet.
/// Every array is allocated once, at the size of all the frames, before it is filled.
fn decode(params: Params, version: u32, frames: &[Frame]) -> (usize, Result<Decoded>) {
    let counts = Counts::of(params, frames);
    let slots = match &counts {
        Ok(counts) => counts.last().map_or(0, |c| c.first + c.new),
        Err(_) => 0,
    };
    let sums = Sums::new(frames);
    let (fixed, rest) = std::thread::scope(|scope| {
        let fixed = scope.spawn(|| {
            let fixed = counts.as_ref().map_err(Clone::clone).and_then(|counts| {
                let mut fixed = Fixed::new(params.dim, slots);
                for (frame, counts) in frames.iter().zip(counts) {
                    let (body, texts) = frame.parts(version)?;
                    fixed.apply(params.dim, body, counts)?;
                    fixed.read_texts(texts, counts.new, version)?;
                }
                Ok(fixed)
            });
            sums.sum();
            fixed
        });
        let rest = counts
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|counts| Loaded::read(params, version, frames, counts));
        sums.sum();
        let fixed = fixed
            .join()
            .unwrap_or_else(|_| Err(corrupt("the codes could not be read")));
        (fixed, rest)
    });
    let decoded = rest.and_then(|(mut state, last)| {
        let fixed = fixed?;
        (state.codes, state.sums, state.texts) = (fixed.codes, fixed.sums, fixed.texts);
        Ok((state, last))
    });
    (sums.intact(), decoded)
}

/// The frames' checksums, summed by whichever thread takes each frame first.
struct Sums<'a> {
    frames: &'a [Frame<'a>],
    next: AtomicUsize,
    intact: Vec<AtomicBool>,
}

impl<'a> Sums<'a> {
    fn new(frames: &'a [Frame<'a>]) -> Sums<'a> {
        Sums {
            frames,
            next: AtomicUsize::new(0),
            intact: frames.iter().map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Sums frames until none is left.
    fn sum(&self) {
        loop {
            let i = self.next.fetch_add(1, Relaxed);
            let Some(frame) = self.frames.get(i) else {
                return;
            };
            self.intact[i].store(checksum(frame.payload) == frame.sum, Relaxed);
        }
    }

    /// How many frames, from the first, pass their checksums (once the summing threads are
    /// joined).
    fn intact(&self) -> usize {
        self.intact.iter().take_while(|i| i.load(Relaxed)).count()
    }
}

/// What the frames hold where their counts put it: the codes and their error terms, and the
/// vectors' checksums; and the metadata texts, which each frame ends with.
struct Fixed {
    codes: Codes,
    sums: Vec<u32>,
    texts: Texts,
}

impl Fixed {
    /// Room for `slots`. (Huge pages are advised once the graph is built, not before the
    /// arrays fill: faulting in fresh huge pages made a load slower, and far less steady, on
    /// a virtual machine whose host takes back the memory its guest frees.)
    fn new(dim: usize, slots: usize) -> Fixed {
        let mut codes = Codes::default();
        codes.reserve(slots, dim, true);
        Fixed {
            codes,
            sums: Vec::with_capacity(slots),
            texts: Texts::default(),
        }
    }

    /// The texts of a frame's `new` slots (none in a file of the previous version).
    fn read_texts(&mut self, texts: &[u8], new: usize, version: u32) -> Result<()> {
        if version != FORMAT_VERSION {
            (0..new).for_each(|_| self.texts.push(None));
            return Ok(());
        }
        // Each text is its four-byte length and its bytes.
        self.texts.reserve(new, texts.len().saturating_sub(4 * new));
        let mut r = Reader::new(texts, 0);
        for _ in 0..new {
            self.texts
                .push(Some(r.str_ref()?).filter(|t| !t.is_empty()));
        }
        if r.at() != texts.len() {
            return Err(corrupt("trailing bytes"));
        }
        Ok(())
    }

    fn apply(&mut self, dim: usize, payload: &[u8], counts: &Counts) -> Result<()> {
        let new = counts.new;
        let mut r = Reader::new(payload, COUNTS + new);
        let c = &mut self.codes;
        r.i8s_into(new * dim, &mut c.codes)?;
        for terms in [
            &mut c.scales,
            &mut c.norms,
            &mut c.residuals,
            &mut c.norm_gaps,
        ] {
            r.words_into(new, terms)?;
        }
        r.words_into(new, &mut self.sums)
    }
}

/// The arrays of an index as its frames rebuild them.
struct Loaded {
    params: Params,
    rng: u64,
    entry: u32,
    levels: Vec<u8>,
    codes: Codes,
    sums: Vec<u32>,
    ids: Ids,
    records: RecordTable,
    texts: Texts,
    parents: Vec<u32>,
    deleted: Vec<bool>,
    level0: Vec<u32>,
    upper: Vec<Vec<u32>>,
    pending: Vec<u32>,
    breadths: Vec<breadth::Saved>,
}

impl Loaded {
    /// Reads all but what [`Fixed`] reads of `frames`, whose `counts` were read; returns the
    /// arrays and the generation and first new slot of the last frame.
    fn read(params: Params, version: u32, frames: &[Frame], counts: &[Counts]) -> Result<Decoded> {
        let last = counts.last().ok_or_else(|| corrupt("no complete save"))?;
        let slots = last.first + last.new;
        let width = 2 * params.m + 1;
        let mut state = Loaded {
            params,
            rng: last.rng,
            entry: last.entry,
            levels: Vec::with_capacity(slots),
            codes: Codes::default(),
            sums: Vec::new(),
            ids: Ids::default(),
            records: RecordTable::new(),
            texts: Texts::default(),
            parents: Vec::with_capacity(slots),
            deleted: Vec::with_capacity(slots),
            level0: vec![0; slots * width],
            upper: vec![Vec::new(); slots],
            pending: Vec::new(),
            breadths: Vec::new(),
        };
        state.ids.reserve(slots);
        state.records.reserve(slots);
        let mut lists = Vec::with_capacity(frames.len());
        let bodies = frames
            .iter()
            .map(|f| f.parts(version).map(|(body, _)| body))
            .collect::<Result<Vec<_>>>()?;
        for (body, counts) in bodies.iter().zip(counts) {
            lists.push(state.read_slots(body, counts)?);
        }
        let mut written = vec![false; slots];
        for (i, (body, counts)) in bodies.iter().zip(counts).enumerate().rev() {
            let last = i + 1 == frames.len();
            state.read_lists(body, counts, lists[i], &mut written, last)?;
        }
        let live = (0..slots as u32).filter(|&s| !state.deleted[s as usize]);
        if !state.ids.revive_all(live) {
            return Err(corrupt("an id with two live slots"));
        }
        Ok((state, (last.generation, last.first)))
    }

    /// Reads a frame's new slots up to their lists: levels, ids, records, parents and
    /// tombstones. Returns where their lists begin.
    fn read_slots(&mut self, payload: &[u8], counts: &Counts) -> Result<usize> {
        let (first, new) = (counts.first, counts.new);
        let mut r = Reader::new(payload, COUNTS);
        let levels = r.take(new)?;
        if levels
            .iter()
            .any(|&l| l as usize > crate::vector::graph::MAX_LEVEL)
        {
            return Err(corrupt("bad level"));
        }
        self.levels.extend_from_slice(levels);
        r.take(new * (self.params.dim + 5 * 4))?; // what `Fixed` reads
        for _ in 0..new {
            self.ids.push(r.str_ref()?, false);
        }
        let mut entries = Vec::new();
        for _ in 0..new {
            entries.clear();
            for _ in 0..r.u32()? {
                let key = r.str_ref()?;
                // Saved from a record, whose keys are ascending.
                if entries.last().is_some_and(|&(last, _)| last >= key) {
                    return Err(corrupt("bad record"));
                }
                entries.push((key, r.scalar()?));
            }
            self.records.push(entries.iter().copied());
        }
        r.words_into(new, &mut self.parents)?;
        if !self.parents[first..]
            .iter()
            .all(|&p| parent_within(p, first + new))
        {
            return Err(corrupt("bad parent"));
        }
        self.deleted.extend(r.take(new)?.iter().map(|&b| b != 0));
        Ok(r.at())
    }

    /// Reads a frame's lists from `at`: its new slots' and those of the older slots that
    /// changed (with their parents), then the older slots deleted, the queue and the breadths
    /// (kept from the `last` frame). Frames are read last first: a slot `written` by a later
    /// frame keeps what that one gave it (every list is still checked against its length).
    fn read_lists(
        &mut self,
        payload: &[u8],
        counts: &Counts,
        at: usize,
        written: &mut [bool],
        last: bool,
    ) -> Result<()> {
        let m = self.params.m;
        let width = 2 * m + 1;
        let (first, slots) = (counts.first, counts.first + counts.new);
        let mut r = Reader::new(payload, at);
        for (slot, &done) in (first..).zip(&written[first..slots]) {
            let upper = self.levels[slot] as usize * (m + 1);
            if done {
                r.take(4 * (width + upper))?;
            } else {
                r.words_over(&mut self.level0[slot * width..(slot + 1) * width])?;
                self.upper[slot] = r.words(upper)?;
            }
        }
        for _ in 0..r.count()? {
            let slot = r.u32()? as usize;
            if slot >= first {
                return Err(corrupt("bad changed slot"));
            }
            let parent = r.u32()?;
            if !parent_within(parent, slots) {
                return Err(corrupt("bad parent"));
            }
            let upper = self.levels[slot] as usize * (m + 1);
            if std::mem::replace(&mut written[slot], true) {
                r.take(4 * (width + upper))?;
            } else {
                self.parents[slot] = parent;
                r.words_over(&mut self.level0[slot * width..(slot + 1) * width])?;
                self.upper[slot] = r.words(upper)?;
            }
        }
        let gone = r.count()?;
        for slot in r.words::<u32>(gone)? {
            *self
                .deleted
                .get_mut(slot as usize)
                .ok_or_else(|| corrupt("bad deleted slot"))? = true;
        }
        let queued = r.count()?;
        let pending = r.words(queued)?;
        let breadths = r.count()?;
        for _ in 0..breadths {
            let [k, linked, ef, served] = [r.u64()?, r.u64()?, r.u64()?, r.u64()?];
            if k == 0 || ef < k || ef > 1 << 24 || linked > slots as u64 || served > 1 {
                return Err(corrupt("bad breadth"));
            }
            if last {
                self.breadths.push([k, linked, ef, served]);
            }
        }
        if r.at() != payload.len() {
            return Err(corrupt("trailing bytes"));
        }
        if last {
            self.pending = pending;
        }
        Ok(())
    }
}

/// Whether `parent` names one of `slots` slots, or none.
fn parent_within(parent: u32, slots: usize) -> bool {
    (parent as usize) < slots || parent == NONE
}

/// Checks a spread of rows, and the rows of the last frame, against their saved checksums: a
/// vectors file of other rows, or damaged ones there, is refused. (Reading every row would
/// read the whole file: opening stays quick instead, and rows are written once, synced
/// before the frame naming them.)
fn check_rows(originals: &Originals, last_first: usize) -> Result<()> {
    let n = originals.sums.len();
    let step = (n / CHECKED_ROWS).max(1);
    let recent = last_first.max(n.saturating_sub(CHECKED_ROWS));
    for slot in (0..n).step_by(step).chain(recent..n) {
        let row = originals
            .get(slot as u32)
            .map_err(|_| corrupt("the vectors file is unreadable"))?;
        if originals::row_sum(&row) != originals.sums[slot] {
            return Err(corrupt("the vectors file disagrees with the index file"));
        }
    }
    Ok(())
}

/// An index file mapped read-only for the length of a load: its pages are the page cache's,
/// so a load copies each array once, straight into its final place (reading the file would
/// first zero and fault in a buffer as large as the file, and copy it twice). The mapping
/// ends with the load: the store only appends to its files or replaces them by renaming,
/// neither of which disturbs a mapping, so only another program cutting the file short
/// during those moments could fault it.
struct Mapped {
    at: *mut libc::c_void,
    len: usize,
}

impl Mapped {
    fn open(path: &Path) -> std::io::Result<Mapped> {
        use std::os::fd::AsRawFd;
        let file = fs::File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::FileTooLarge))?;
        if len == 0 {
            return Ok(Mapped {
                at: std::ptr::null_mut(),
                len,
            });
        }
        // Not populated at once: the two decoding threads fault their pages in side by side,
        // where one pass to populate the mapping would come first, on one thread.
        let flags = libc::MAP_PRIVATE;
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                flags,
                file.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapped { at, len })
    }

    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // The mapping is `len` readable bytes until `drop`, and nothing writes to it.
        unsafe { std::slice::from_raw_parts(self.at as *const u8, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if self.len > 0 {
            unsafe {
                libc::munmap(self.at, self.len);
            }
        }
    }
}
