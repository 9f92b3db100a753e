//! The float vectors of an index ("originals"), kept on disk instead of in memory.
//!
//! Graph walks measure the int8 codes, which stay in memory; the float vectors are read only
//! to re-rank what a search found (a few dozen per query) and to compact the graph. So they
//! live in a file of fixed-width rows — row `s` is slot `s`'s vector, little-endian f32 —
//! read with positioned reads. Rows are written once and never change: a new slot appends a
//! row, a compaction writes a new file. The newest rows wait in memory and are written out a
//! few megabytes at a time.
//!
//! A small index keeps a copy of every row in memory as well ([`HELD_BYTES`] at most): a
//! positioned read costs about a microsecond and a re-rank makes a dozen, a large share of a
//! search when the graph is small, while a few megabytes of floats cost little. An index told
//! to hold its vectors ([`Originals::hold_all`]) keeps every row in memory however many: its
//! searches read no file, for memory the size of the float vectors.
//!
//! Reads go through the page cache, not a memory mapping: a mapping would add every page a
//! re-rank touches (and the kernel's fault-around neighbours) to the process's resident set,
//! which after a few thousand queries is the whole file; a positioned read copies one row and
//! leaves the resident set alone. The page cache still keeps hot rows in memory, shared,
//! and the kernel can drop them under pressure.
//!
//! The file is either the one beside the database (`<db>.<index>.vectors`, see `persist`), or,
//! for an index with no file yet (a new or compacted index, an in-memory database, a store
//! over PostgreSQL), an unlinked temporary file: it takes no name on disk and disappears with
//! the process.
//!
//! Layout: a [`HEADER_LEN`]-byte header — `magic (8) | version u32 | dim u32 | file id (16) |
//! origin (str) | checksum u64 of what precedes it`, zero-padded — then the rows.

use std::cell::RefCell;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{CoreError, Result};
use crate::vector::persist::codec::{checksum, Reader, Writer};

const MAGIC: &[u8; 8] = b"TRVECS\x00\x01";
const VERSION: u32 = 1;
/// Rows start here: one page, so they stay page-aligned.
pub const HEADER_LEN: u64 = 4096;
/// The rows not yet in the file are written out once they take this many bytes.
const SPILL_BYTES: usize = 4 << 20;
/// Every row stays in memory too while all of them take at most this many bytes.
#[cfg(not(test))]
pub const HELD_BYTES: usize = 16 << 20;
/// Small in tests, so that their indexes read rows from the file as large ones do.
#[cfg(test)]
pub const HELD_BYTES: usize = 32 << 10;

thread_local! {
    /// The row a positioned read lands in.
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The open file behind the stored rows.
pub(crate) struct Backing {
    file: File,
    /// The file's name on disk, `None` for an unlinked temporary file.
    pub(crate) path: Option<PathBuf>,
    /// Random at creation: an index file names the vectors file it was saved with.
    pub(crate) id: u128,
    /// Rows written to the file.
    rows: usize,
}

/// The float vectors by slot: rows in a file, the newest (or, while they are few or when told
/// to, all of them) in memory.
pub struct Originals {
    dim: usize,
    backing: Option<Backing>,
    /// Rows `first..` in memory: every row the file lacks, and every row while they fit the
    /// budget.
    memory: Vec<f32>,
    first: usize,
    /// Per row, a checksum of its bytes: the index file keeps them, and a load checks rows
    /// of the vectors file against them.
    pub(crate) sums: Vec<u32>,
    /// Every row stays in memory while all of them take at most this many bytes
    /// ([`HELD_BYTES`], or unlimited once told to hold them all).
    pub(crate) budget: usize,
}

impl Originals {
    pub fn new(dim: usize) -> Originals {
        Originals {
            dim,
            backing: None,
            memory: Vec::new(),
            first: 0,
            sums: Vec::new(),
            budget: HELD_BYTES,
        }
    }

    /// Rows held, in the file and in memory.
    pub fn len(&self) -> usize {
        self.first + self.memory.len() / self.dim.max(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows written to the file.
    pub(crate) fn stored(&self) -> usize {
        self.backing.as_ref().map_or(0, |b| b.rows)
    }

    pub(crate) fn backing(&self) -> Option<&Backing> {
        self.backing.as_ref()
    }

    /// Bytes of float vectors held in memory.
    pub fn memory_bytes(&self) -> usize {
        (self.memory.capacity() + self.sums.capacity()) * 4
    }

    /// Rows readable from memory.
    #[cfg(test)]
    pub(crate) fn in_memory(&self) -> usize {
        self.len() - self.first
    }

    /// Whether `rows` rows are few enough to keep in memory as well.
    fn held(&self, rows: usize) -> bool {
        rows * self.dim * 4 <= self.budget
    }

    /// Keeps every row in memory as well (`all`), reading in those only the file holds; or
    /// back to holding them only while they are few, dropping the rows the file holds. A
    /// failed read changes nothing.
    pub fn hold_all(&mut self, all: bool) -> Result<()> {
        let before = std::mem::replace(&mut self.budget, if all { usize::MAX } else { HELD_BYTES });
        if let Err(e) = self.read_in() {
            self.budget = before;
            return Err(e);
        }
        self.keep_if_held();
        Ok(())
    }

    /// Reads the rows only the file holds into memory, when every row fits the budget.
    fn read_in(&mut self) -> Result<()> {
        let Some(b) = self
            .backing
            .as_ref()
            .filter(|_| self.first > 0 && self.held(self.len()))
        else {
            return Ok(());
        };
        let mut rows = vec![0.0; self.first * self.dim];
        read_rows(&b.file, self.dim, 0, &mut rows).map_err(|e| io("read", b.path.as_deref(), e))?;
        rows.extend_from_slice(&self.memory);
        self.memory = rows;
        self.first = 0;
        Ok(())
    }

    /// The rows the file lacks.
    fn unwritten(&self) -> &[f32] {
        &self.memory[(self.stored() - self.first) * self.dim..]
    }

    /// Appends a row (already prepared); writes the rows the file lacks out once they are
    /// many enough. If that write fails (a full disk), the rows stay in memory and the next
    /// one retries.
    pub fn push(&mut self, row: &[f32]) {
        self.sums.push(row_sum(row));
        self.memory.extend_from_slice(row);
        if self.unwritten().len() * 4 >= SPILL_BYTES {
            let _ = self.spill();
        }
    }

    /// Writes the rows the file lacks (to an unlinked temporary file if there is none), and
    /// keeps them in memory only while every row is kept there.
    pub fn spill(&mut self) -> Result<()> {
        if self.unwritten().is_empty() {
            return Ok(());
        }
        if self.backing.is_none() {
            self.backing = Some(Backing::temporary(self.dim)?);
        }
        let (dim, len, first) = (self.dim, self.len(), self.first);
        let Some(b) = self.backing.as_mut() else {
            return Ok(());
        };
        write_rows(&b.file, dim, b.rows, &self.memory[(b.rows - first) * dim..])
            .map_err(|e| io("write", b.path.as_deref(), e))?;
        b.rows = len;
        self.keep_if_held();
        Ok(())
    }

    /// Drops the rows in memory that the file holds, unless every row is few enough to keep.
    fn keep_if_held(&mut self) {
        if !self.held(self.len()) {
            let stored = self.stored();
            self.memory.drain(..(stored - self.first) * self.dim);
            self.memory.shrink_to(SPILL_BYTES / 4);
            self.first = stored;
        }
    }

    /// Calls `f` with the row of `slot`. A failed read (a disk error) hands `f` `fallback`
    /// instead, so a search degrades to approximate scores rather than failing.
    #[inline]
    pub fn with_row<R>(
        &self,
        slot: u32,
        fallback: impl FnOnce() -> Vec<f32>,
        f: impl FnOnce(&[f32]) -> R,
    ) -> R {
        let (slot, dim) = (slot as usize, self.dim);
        let b = match self.place(slot) {
            Place::File(b) => b,
            Place::Memory(row) => return f(row),
        };
        ROW.with(|cell| {
            let mut row = cell.borrow_mut();
            row.resize(dim, 0.0);
            if read_row(&b.file, dim, slot, &mut row).is_ok() {
                f(&row)
            } else {
                f(&fallback())
            }
        })
    }

    /// Where the row of `slot` is.
    #[inline]
    fn place(&self, slot: usize) -> Place<'_> {
        match &self.backing {
            Some(b) if slot < self.first => Place::File(b),
            _ => {
                let at = (slot - self.first) * self.dim;
                Place::Memory(&self.memory[at..at + self.dim])
            }
        }
    }

    /// A copy of the row of `slot`, or an I/O error.
    pub fn get(&self, slot: u32) -> Result<Vec<f32>> {
        let (slot, dim) = (slot as usize, self.dim);
        let b = match self.place(slot) {
            Place::File(b) => b,
            Place::Memory(row) => return Ok(row.to_vec()),
        };
        let mut row = vec![0.0; dim];
        read_row(&b.file, dim, slot, &mut row).map_err(|e| io("read", b.path.as_deref(), e))?;
        Ok(row)
    }

    /// Copies rows `from..self.len()` into `target` at the same positions.
    pub(crate) fn copy_rows(&self, target: &Backing, from: usize) -> Result<()> {
        const CHUNK: usize = 1 << 14;
        let dim = self.dim;
        let mut row = from;
        let mut buf = Vec::new();
        while let Some(b) = self.backing.as_ref().filter(|_| row < self.first) {
            let n = CHUNK.min(self.first - row);
            buf.resize(n * dim, 0.0);
            read_rows(&b.file, dim, row, &mut buf).map_err(|e| io("read", b.path.as_deref(), e))?;
            write_rows(&target.file, dim, row, &buf)
                .map_err(|e| io("write", target.path.as_deref(), e))?;
            row += n;
        }
        let skip = (row - self.first) * dim;
        write_rows(
            &target.file,
            dim,
            row,
            &self.memory[skip.min(self.memory.len())..],
        )
        .map_err(|e| io("write", target.path.as_deref(), e))
    }

    /// Makes `backing`, which holds every row, the file behind them.
    pub(crate) fn adopt(&mut self, mut backing: Backing) {
        backing.rows = self.len();
        self.backing = Some(backing);
        self.keep_if_held();
    }

    /// Syncs the file to disk.
    pub(crate) fn sync(&self) -> Result<()> {
        match &self.backing {
            Some(b) => b
                .file
                .sync_data()
                .map_err(|e| io("sync", b.path.as_deref(), e)),
            None => Ok(()),
        }
    }

    /// Rows over an opened file of `rows` rows, read into memory as well when they are few.
    pub(crate) fn over(dim: usize, backing: Backing, sums: Vec<u32>) -> Result<Originals> {
        let mut originals = Originals {
            first: backing.rows,
            backing: Some(backing),
            sums,
            ..Originals::new(dim)
        };
        originals.read_in()?;
        Ok(originals)
    }
}

/// Where a row is: only in the file, or in memory.
enum Place<'a> {
    File(&'a Backing),
    Memory(&'a [f32]),
}

/// Opens `path` as `options` say, without access-time updates where the process may ask for
/// that (it owns the file): each positioned read then skips the access-time check.
fn open_without_atime(options: &OpenOptions, path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    match options.clone().custom_flags(libc::O_NOATIME).open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => options.open(path),
        opened => opened,
    }
}

impl Backing {
    /// A new, empty, unlinked file in the temporary directory.
    fn temporary(dim: usize) -> Result<Backing> {
        let dir = std::env::temp_dir();
        let id = fresh_id();
        let path = dir.join(format!(
            "threadrecall-{}-{id:032x}.vectors",
            std::process::id()
        ));
        let file = open_without_atime(
            OpenOptions::new().read(true).write(true).create_new(true),
            &path,
        )
        .map_err(|e| io("create", Some(&path), e))?;
        let _ = fs::remove_file(&path); // unlinked: it lives as long as the file is open
        let backing = Backing {
            file,
            path: None,
            id,
            rows: 0,
        };
        backing.write_header(dim, "")?;
        Ok(backing)
    }

    /// A new, empty file at `path` (replacing any), tagged with `origin`.
    pub(crate) fn create(path: &Path, dim: usize, origin: &str) -> Result<Backing> {
        let file = open_without_atime(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true),
            path,
        )
        .map_err(|e| io("create", Some(path), e))?;
        let backing = Backing {
            file,
            path: Some(path.to_path_buf()),
            id: fresh_id(),
            rows: 0,
        };
        backing.write_header(dim, origin)?;
        Ok(backing)
    }

    /// Opens the file at `path` if it is the vectors file `id` of an index of dimension `dim`
    /// and origin `origin`, holding at least `rows` rows; anything else is `IndexCorrupt`.
    pub(crate) fn open(
        path: &Path,
        dim: usize,
        id: u128,
        origin: &str,
        rows: usize,
    ) -> Result<Backing> {
        let file = open_without_atime(OpenOptions::new().read(true).write(true), path)
            .map_err(|_| corrupt("the vectors file is missing"))?;
        let mut head = vec![0u8; HEADER_LEN as usize];
        file.read_exact_at(&mut head, 0)
            .map_err(|_| corrupt("the vectors file is truncated"))?;
        if &head[..8] != MAGIC {
            return Err(corrupt("not a vectors file"));
        }
        let mut r = Reader::new(&head, 8);
        let (version, file_dim) = (r.u32()?, r.u32()? as usize);
        let file_id = r.u128()?;
        let file_origin = r.str()?;
        let end = r.at();
        if r.u64()? != checksum(&head[..end]) {
            return Err(corrupt("the vectors file's header is damaged"));
        }
        if version != VERSION || file_dim != dim || file_id != id || &*file_origin != origin {
            return Err(corrupt("the vectors file belongs to another index"));
        }
        let needed = HEADER_LEN + (rows * dim * 4) as u64;
        let len = file
            .metadata()
            .map_err(|e| io("read", Some(path), e))?
            .len();
        if len < needed {
            return Err(corrupt("the vectors file is truncated"));
        }
        Ok(Backing {
            file,
            path: Some(path.to_path_buf()),
            id,
            rows,
        })
    }

    fn write_header(&self, dim: usize, origin: &str) -> Result<()> {
        let mut w = Writer::new();
        w.bytes(MAGIC);
        w.u32(VERSION);
        w.u32(dim as u32);
        w.u128(self.id);
        w.str(origin);
        let sum = checksum(w.as_bytes());
        w.u64(sum);
        let mut head = w.into_bytes();
        if head.len() > HEADER_LEN as usize {
            return Err(CoreError::InvalidArgument(
                "the index origin is too long".into(),
            ));
        }
        head.resize(HEADER_LEN as usize, 0);
        self.file
            .write_all_at(&head, 0)
            .map_err(|e| io("write", self.path.as_deref(), e))
    }

    /// Syncs and renames the file to `path`.
    pub(crate) fn rename(&mut self, path: &Path) -> Result<()> {
        self.file
            .sync_all()
            .map_err(|e| io("sync", self.path.as_deref(), e))?;
        if let Some(from) = &self.path {
            fs::rename(from, path).map_err(|e| io("rename", Some(from), e))?;
        }
        self.path = Some(path.to_path_buf());
        Ok(())
    }
}

/// The checksum of a row's little-endian bytes.
pub(crate) fn row_sum(row: &[f32]) -> u32 {
    let mut w = Writer::with_capacity(row.len() * 4);
    w.words(row);
    let h = checksum(w.as_bytes());
    (h ^ (h >> 32)) as u32
}

/// Reads one row of `dim` floats at `slot`.
#[inline]
fn read_row(file: &File, dim: usize, slot: usize, row: &mut [f32]) -> std::io::Result<()> {
    read_rows(file, dim, slot, row)
}

fn read_rows(file: &File, dim: usize, first: usize, rows: &mut [f32]) -> std::io::Result<()> {
    let at = HEADER_LEN + (first * dim * 4) as u64;
    // SAFETY: any bit pattern is a valid f32; the file holds little-endian f32.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(rows.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(rows))
    };
    file.read_exact_at(bytes, at)?;
    if cfg!(target_endian = "big") {
        rows.iter_mut()
            .for_each(|x| *x = f32::from_bits(x.to_bits().swap_bytes()));
    }
    Ok(())
}

fn write_rows(file: &File, dim: usize, first: usize, rows: &[f32]) -> std::io::Result<()> {
    let at = HEADER_LEN + (first * dim * 4) as u64;
    let mut w = Writer::new();
    let bytes: &[u8] = if cfg!(target_endian = "little") {
        // SAFETY: f32 has no padding; u8 needs no alignment.
        unsafe {
            std::slice::from_raw_parts(rows.as_ptr().cast::<u8>(), std::mem::size_of_val(rows))
        }
    } else {
        w.words(rows);
        w.as_bytes()
    };
    file.write_all_at(bytes, at)
}

/// A random-enough 128-bit id: the time, the process and a counter, mixed.
pub(crate) fn fresh_id() -> u128 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let a = mix(nanos ^ (std::process::id() as u64) << 32);
    let b = mix(a ^ COUNTER
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_add(0x9E37_79B9_7F4A_7C15));
    (a as u128) << 64 | b as u128
}

fn io(what: &str, path: Option<&Path>, e: std::io::Error) -> CoreError {
    let name = path.map_or("a temporary vectors file".to_string(), |p| {
        p.display().to_string()
    });
    CoreError::Io(format!("cannot {what} {name}: {e}"))
}

fn corrupt(why: &str) -> CoreError {
    CoreError::IndexCorrupt(why.to_string())
}
