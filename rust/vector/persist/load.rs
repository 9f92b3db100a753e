//! Reading an index file back: its header, then its frames in order, each applied to arrays
//! allocated once at their final size, then the vectors file beside it opened and checked.

use std::fs;
use std::path::Path;

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
use crate::vector::graph::{advise_huge_pages, Graph, Params, NONE};
use crate::vector::ids::Ids;
use crate::vector::postings::Postings;
use crate::vector::records::RecordTable;
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
    // The frames' checksums are summed on another thread while the frames are decoded. One
    // that fails its checksum ends the index at the frame before it: then (rarely: after a
    // save cut short) the frames before it are decoded again, by themselves.
    let (intact, decoded) = std::thread::scope(|scope| {
        let intact = scope.spawn(|| {
            frames
                .iter()
                .take_while(|f| checksum(f.payload) == f.sum)
                .count()
        });
        let decoded = decode(params, version, &frames);
        (intact.join().unwrap_or(0), decoded)
    });
    let (mut state, (generation, last_first)) = if intact == frames.len() {
        decoded?
    } else {
        decode(params, version, &frames[..intact])?
    };
    let at = frames[..intact].last().map_or(start, |f| f.end);
    let slots = state.levels.len();
    drop(file);
    let codes = std::mem::take(&mut state.codes);
    let backing = Backing::open(&vectors_path(path), params.dim, vectors, &origin, slots)?;
    let originals = Originals::over(params.dim, backing, std::mem::take(&mut state.sums));
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
        let mut ids = state.ids;
        if !ids.revive_all((0..slots as u32).filter(|&s| !graph.is_deleted(s))) {
            return Err(corrupt("an id with two live slots"));
        }
        let postings = postings
            .join()
            .map_err(|_| corrupt("the metadata could not be read"))?;
        Ok((graph, ids, postings))
    })?;
    let index = VectorIndex::assemble(graph, ids, records, postings);
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

/// The arrays `frames` rebuild, with the generation and first new slot of the last one
/// (none: no complete save).
fn decode(params: Params, version: u32, frames: &[Frame]) -> Result<(Loaded, (u64, usize))> {
    let mut state = Loaded::new(params, version);
    let mut last = None;
    for frame in frames {
        last = Some(state.apply(frame.payload)?);
    }
    Ok((state, last.ok_or_else(|| corrupt("no complete save"))?))
}

/// The arrays of an index as its frames rebuild them.
struct Loaded {
    params: Params,
    version: u32,
    rng: u64,
    entry: u32,
    levels: Vec<u8>,
    codes: Codes,
    sums: Vec<u32>,
    ids: Ids,
    records: RecordTable,
    parents: Vec<u32>,
    deleted: Vec<bool>,
    level0: Vec<u32>,
    upper: Vec<Vec<u32>>,
    pending: Vec<u32>,
    breadths: Vec<breadth::Saved>,
}

impl Loaded {
    fn new(params: Params, version: u32) -> Loaded {
        Loaded {
            params,
            version,
            rng: 0,
            entry: NONE,
            levels: Vec::new(),
            codes: Codes::default(),
            sums: Vec::new(),
            ids: Ids::default(),
            records: RecordTable::new(),
            parents: Vec::new(),
            deleted: Vec::new(),
            level0: Vec::new(),
            upper: Vec::new(),
            pending: Vec::new(),
            breadths: Vec::new(),
        }
    }

    /// Room for the `slots` of the first frame (most of an index, usually): the large arrays
    /// are allocated once, on huge pages where the system offers them, before they are filled.
    fn reserve(&mut self, slots: usize) {
        let (dim, width) = (self.params.dim, 2 * self.params.m + 1);
        self.codes.reserve(slots, dim, true);
        self.level0.reserve_exact(slots * width);
        advise_huge_pages(&self.codes.codes);
        advise_huge_pages(&self.level0);
    }

    /// Applies one frame; returns its generation and its first new slot.
    fn apply(&mut self, payload: &[u8]) -> Result<(u64, usize)> {
        let (dim, m) = (self.params.dim, self.params.m);
        let width = 2 * m + 1;
        let mut r = Reader::new(payload, 0);
        let generation = r.u64()?;
        self.rng = r.u64()?;
        self.entry = r.u32()?;
        let (first, slots) = (r.count()?, r.count()?);
        if first != self.levels.len() || slots < first {
            return Err(corrupt("frames out of order"));
        }
        let new = slots - first;
        // Every new slot takes at least its codes and level-0 block: no count past what the
        // payload can hold is believed (nor reserved for).
        if new
            .checked_mul(dim + 4 * width)
            .is_none_or(|bytes| bytes > payload.len())
        {
            return Err(corrupt("bad count"));
        }
        if first == 0 {
            self.reserve(slots);
        }
        let levels = r.take(new)?;
        if levels
            .iter()
            .any(|&l| l as usize > crate::vector::graph::MAX_LEVEL)
        {
            return Err(corrupt("bad level"));
        }
        self.levels.extend_from_slice(levels);
        let c = &mut self.codes;
        let code_bytes = new.checked_mul(dim).ok_or_else(|| corrupt("bad count"))?;
        r.i8s_into(code_bytes, &mut c.codes)?;
        for terms in [
            &mut c.scales,
            &mut c.norms,
            &mut c.residuals,
            &mut c.norm_gaps,
        ] {
            r.words_into(new, terms)?;
        }
        r.words_into(new, &mut self.sums)?;
        self.ids.reserve(new);
        for _ in 0..new {
            self.ids.push(r.str_ref()?, false);
        }
        self.records.reserve(new);
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
        self.deleted.extend(r.take(new)?.iter().map(|&b| b != 0));
        self.level0.reserve(new * width);
        for &level in levels {
            r.words_into(width, &mut self.level0)?;
            self.upper.push(r.words(level as usize * (m + 1))?);
        }
        for _ in 0..r.count()? {
            let slot = r.u32()? as usize;
            if slot >= first {
                return Err(corrupt("bad changed slot"));
            }
            self.parents[slot] = r.u32()?;
            let block = r.words::<u32>(width)?;
            self.level0[slot * width..(slot + 1) * width].copy_from_slice(&block);
            self.upper[slot] = r.words(self.levels[slot] as usize * (m + 1))?;
        }
        let gone: Vec<u32> = {
            let n = r.count()?;
            r.words(n)?
        };
        for slot in gone {
            *self
                .deleted
                .get_mut(slot as usize)
                .ok_or_else(|| corrupt("bad deleted slot"))? = true;
        }
        let queued = r.count()?;
        self.pending = r.words(queued)?;
        self.breadths.clear();
        for _ in 0..r.count()? {
            let [k, linked, ef] = [r.u64()?, r.u64()?, r.u64()?];
            let served = if self.version == FORMAT_VERSION {
                r.u64()?
            } else {
                0
            };
            if k == 0 || ef < k || ef > 1 << 24 || linked > slots as u64 || served > 1 {
                return Err(corrupt("bad breadth"));
            }
            self.breadths.push([k, linked, ef, served]);
        }
        if self
            .parents
            .iter()
            .any(|&p| p as usize >= slots && p != NONE)
        {
            return Err(corrupt("bad parent"));
        }
        if r.at() != payload.len() {
            return Err(corrupt("trailing bytes"));
        }
        Ok((generation, first))
    }
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
        // Populated at once where the system can: one pass maps every page instead of a
        // fault per few pages.
        #[cfg(target_os = "linux")]
        let flags = libc::MAP_PRIVATE | libc::MAP_POPULATE;
        #[cfg(not(target_os = "linux"))]
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
