//! The index file, and the only place the core touches the filesystem.
//!
//! Layout, all little-endian:
//! `magic (8) | version u32 | dim u32 | metric u8 | m u32 | ef_construction u32 | seed u64 |
//! rng u64 | slots u64 | generation u64 | origin (str) | entry u32`, then per-slot arrays — vectors (f32),
//! levels (u8), level-0 links, upper links, parents (u32, see `insert`), tombstones (u8), the queue of slots not yet linked
//! (count u64, slots u32), ids, metadata records — and a checksum of everything before it. Saves go to a temporary file renamed over the old one.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::distance::Metric;
use crate::error::{CoreError, Result};
use crate::filter::{Record, Scalar, Value};
use crate::vector::adjacency::Adjacency;
use crate::vector::graph::{advise_huge_pages, Graph, Params};
use crate::vector::records::RecordTable;
use crate::vector::VectorIndex;

const MAGIC: &[u8; 8] = b"TRHNSW\x00\x01";
pub const FORMAT_VERSION: u32 = 4;

/// Writes `index` to `path` atomically, tagged with the database `generation` it reflects
/// and the `origin` of the index in that database (which database, which creation of it).
pub fn save(index: &VectorIndex, path: &Path, generation: u64, origin: &str) -> Result<()> {
    write(path, &encode(index, generation, origin))
}

/// Writes encoded bytes to `path` atomically: to a temporary file, synced, then renamed. A
/// failed write leaves neither file behind.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!(
        "{}tmp",
        path.extension()
            .map(|e| format!("{}.", e.to_string_lossy()))
            .unwrap_or_default()
    ));
    let written = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    written.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        CoreError::Io(format!("cannot write {}: {e}", path.display()))
    })
}

/// Reads an index file back; anything truncated, foreign or of another version is
/// `IndexCorrupt`. Returns the index and the generation and origin it was saved with.
pub fn load(path: &Path) -> Result<(VectorIndex, u64, Box<str>)> {
    let bytes = fs::read(path)
        .map_err(|e| CoreError::Io(format!("cannot read {}: {e}", path.display())))?;
    decode(&bytes)
}

/// The file's bytes for `index` tagged with `generation` and `origin`: a copy, so writing it
/// to disk needs no hold on the index.
pub fn encode(index: &VectorIndex, generation: u64, origin: &str) -> Vec<u8> {
    let g = &index.graph;
    let _linking = g.linking.lock(); // no half-linked batch in the file
    let p = g.params();
    let mut w = Writer(Vec::with_capacity(
        g.vectors.len() * 4 + g.slots() * (4 * p.m + 2) * 4 + 1024,
    ));
    w.0.extend_from_slice(MAGIC);
    w.u32(FORMAT_VERSION);
    w.u32(p.dim as u32);
    w.0.push(p.metric.code());
    w.u32(p.m as u32);
    w.u32(p.ef_construction as u32);
    w.u64(p.seed);
    w.u64(g.rng);
    w.u64(g.slots() as u64);
    w.u64(generation);
    w.str(origin);
    w.u32(g.entry());
    w.words(&g.vectors);
    w.0.extend_from_slice(&g.levels);
    g.links.level0_words().for_each(|x| w.u32(x));
    g.links.upper_words().for_each(|x| w.u32(x));
    g.links.parent_words().for_each(|x| w.u32(x));
    w.0.extend(g.deleted.iter().map(|&d| d as u8));
    w.u64(g.pending.len() as u64);
    g.pending.iter().for_each(|&s| w.u32(s));
    index.ids.iter().for_each(|id| w.str(id));
    for slot in 0..index.records.len() as u32 {
        let record = index.records.get(slot);
        w.u32(record.iter().count() as u32);
        for (key, value) in record.iter() {
            w.str(key);
            w.value(value);
        }
    }
    let sum = checksum(&w.0);
    w.u64(sum);
    w.0
}

fn decode(bytes: &[u8]) -> Result<(VectorIndex, u64, Box<str>)> {
    if bytes.len() < MAGIC.len() + 8 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(corrupt("not a threadrecall index file"));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 8);
    let mut r = Reader {
        bytes: body,
        at: MAGIC.len(),
    };
    let version = r.u32()?;
    if version != FORMAT_VERSION {
        return Err(corrupt(&format!(
            "format version {version}, expected {FORMAT_VERSION}"
        )));
    }
    if u64::from_le_bytes(tail.try_into().unwrap_or_default()) != checksum(body) {
        return Err(corrupt("checksum mismatch"));
    }
    let dim = r.u32()? as usize;
    let metric = Metric::from_code(r.u8()?).ok_or_else(|| corrupt("unknown metric"))?;
    let m = r.u32()? as usize;
    let ef_construction = r.u32()? as usize;
    let seed = r.u64()?;
    let params = Params::new(dim, metric, m, ef_construction, seed)
        .map_err(|_| corrupt("bad parameters"))?;
    let rng = r.u64()?;
    let slots = usize::try_from(r.u64()?).map_err(|_| corrupt("bad count"))?;
    let generation = r.u64()?;
    let origin = r.str()?;
    let entry = r.u32()?;
    let vectors = r.f32s(slots.checked_mul(dim).ok_or_else(|| corrupt("bad count"))?)?;
    let levels = r.take(slots)?.to_vec();
    let links0 = r.u32s(slots * (2 * m + 1))?;
    let mut upper = Vec::with_capacity(slots);
    for &level in &levels {
        upper.push(r.u32s(level as usize * (m + 1))?);
    }
    let parent = r.u32s(slots)?;
    if parent
        .iter()
        .any(|&p| p as usize >= slots && p != crate::vector::graph::NONE)
    {
        return Err(corrupt("bad parent"));
    }
    let deleted: Vec<bool> = r.take(slots)?.iter().map(|&b| b != 0).collect();
    let queued = usize::try_from(r.u64()?).map_err(|_| corrupt("bad count"))?;
    let pending = r.u32s(queued)?.into();
    let mut ids = Vec::with_capacity(slots);
    for _ in 0..slots {
        ids.push(r.str()?);
    }
    let mut records = RecordTable::new();
    records.reserve(slots);
    for _ in 0..slots {
        let mut record = Record::new();
        for _ in 0..r.u32()? {
            let key = r.str()?;
            record.set(&key, r.value()?);
        }
        records.push_record(&record);
    }
    if r.at != body.len() {
        return Err(corrupt("trailing bytes"));
    }
    let graph = Graph::from_parts(
        params,
        rng,
        vectors,
        levels,
        Adjacency::from_words(m, links0, upper, parent),
        deleted,
        entry,
        pending,
    );
    graph.validate().map_err(|e| corrupt(&e))?;
    Ok((
        VectorIndex::from_graph(graph, ids, records),
        generation,
        origin,
    ))
}

fn corrupt(why: &str) -> CoreError {
    CoreError::IndexCorrupt(why.to_string())
}

/// FNV-1a over 8-byte words: cheap, and enough to notice a damaged file.
fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        h = (h ^ u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .wrapping_mul(0x0100_0000_01b3);
    }
    for &b in chunks.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ bytes.len() as u64
}

struct Writer(Vec<u8>);

/// A plain four-byte value the file stores as is.
trait Word: Copy {
    fn le(self) -> [u8; 4];
}

impl Word for f32 {
    fn le(self) -> [u8; 4] {
        self.to_le_bytes()
    }
}

impl Word for u32 {
    fn le(self) -> [u8; 4] {
        self.to_le_bytes()
    }
}

impl Writer {
    fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    /// Four-byte words, little-endian: one copy on a little-endian machine.
    fn words<T: Word>(&mut self, xs: &[T]) {
        if cfg!(target_endian = "little") {
            // SAFETY: `Word` is only f32 and u32, four initialised bytes each; u8 needs no alignment.
            let bytes = unsafe {
                std::slice::from_raw_parts(xs.as_ptr().cast::<u8>(), std::mem::size_of_val(xs))
            };
            self.0.extend_from_slice(bytes);
        } else {
            xs.iter().for_each(|&x| self.0.extend_from_slice(&x.le()));
        }
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn value(&mut self, v: Scalar<'_>) {
        match v {
            Scalar::Null => self.0.push(0),
            Scalar::Bool(b) => self.0.extend_from_slice(&[1, b as u8]),
            Scalar::Int(i) => {
                self.0.push(2);
                self.0.extend_from_slice(&i.to_le_bytes());
            }
            Scalar::Float(f) => {
                self.0.push(3);
                self.0.extend_from_slice(&f.to_le_bytes());
            }
            Scalar::Str(s) => {
                self.0.push(4);
                self.str(s);
            }
            Scalar::Other => self.0.push(5),
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| corrupt("truncated"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
    fn u32s(&mut self, n: usize) -> Result<Vec<u32>> {
        self.words(n, u32::from_le_bytes)
    }
    fn f32s(&mut self, n: usize) -> Result<Vec<f32>> {
        self.words(n, f32::from_le_bytes)
    }
    /// `n` four-byte words, into memory advised for huge pages before it is touched.
    fn words<T>(&mut self, n: usize, decode: fn([u8; 4]) -> T) -> Result<Vec<T>> {
        let raw = self.take(n.checked_mul(4).ok_or_else(|| corrupt("bad count"))?)?;
        let mut out = Vec::with_capacity(n);
        advise_huge_pages(&out);
        out.extend(
            raw.chunks_exact(4)
                .map(|c| decode([c[0], c[1], c[2], c[3]])),
        );
        Ok(out)
    }
    fn str(&mut self) -> Result<Box<str>> {
        let n = self.u32()? as usize;
        let raw = self.take(n)?;
        std::str::from_utf8(raw)
            .map(Into::into)
            .map_err(|_| corrupt("bad text"))
    }
    fn value(&mut self) -> Result<Value> {
        Ok(match self.u8()? {
            0 => Value::Null,
            1 => Value::Bool(self.u8()? != 0),
            2 => Value::Int(i64::from_le_bytes(
                self.take(8)?.try_into().unwrap_or_default(),
            )),
            3 => Value::Float(f64::from_le_bytes(
                self.take(8)?.try_into().unwrap_or_default(),
            )),
            4 => Value::Str(self.str()?),
            5 => Value::Other,
            _ => return Err(corrupt("bad value tag")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{Filter, Input};
    use crate::vector::graph::tests::clustered;

    fn temp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("threadrecall-persist-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn a_failed_write_leaves_no_file() {
        let path = temp("occupied.hnsw");
        fs::create_dir_all(&path).unwrap(); // a directory: the final rename fails
        assert!(matches!(write(&path, b"bytes"), Err(CoreError::Io(_))));
        assert!(!temp("occupied.hnsw.tmp").exists());
        assert!(path.is_dir());
    }

    fn sample() -> (VectorIndex, Vec<Vec<f32>>) {
        // seed 31
        let data = clustered(31, 700, 12, 7);
        let mut idx = VectorIndex::new(12, Metric::Euclidean, 8, 60, 5).unwrap();
        let ids = (0..700).map(|i| format!("id-{i}")).collect();
        let flat: Vec<f32> = data.iter().flatten().copied().collect();
        let metas = (0..700)
            .map(|i| {
                Input::Map(vec![
                    ("thread_id".into(), Input::Str(format!("t{}", i % 9))),
                    ("score".into(), Input::Float(i as f64 / 3.0)),
                    ("flag".into(), Input::Bool(i % 2 == 0)),
                    ("none".into(), Input::Null),
                    ("nested".into(), Input::List(vec![])),
                ])
            })
            .collect();
        idx.add(ids, &flat, metas).unwrap();
        idx.link_pending(600);
        idx.remove(&["id-5".to_string(), "id-6".to_string(), "id-650".to_string()]);
        (idx, data)
    }

    #[test]
    fn save_then_load_gives_identical_results() {
        let (idx, data) = sample();
        let path = temp("a.hnsw");
        save(&idx, &path, 42, "db-1").unwrap();
        let (back, generation, origin) = load(&path).unwrap();
        assert_eq!((generation, &*origin), (42, "db-1"));
        assert_eq!(back.len(), idx.len());
        let f = Filter::vector(&Input::Map(vec![("flag".into(), Input::Bool(true))])).unwrap();
        for q in data.iter().step_by(37) {
            assert_eq!(
                back.search(q, 10, None, Some(32)).unwrap(),
                idx.search(q, 10, None, Some(32)).unwrap()
            );
            assert_eq!(
                back.search(q, 5, f.as_ref(), None).unwrap(),
                idx.search(q, 5, f.as_ref(), None).unwrap()
            );
        }
        assert!(!back.contains("id-5"));
        assert!(!back.contains("id-650"));
        assert!(idx.pending_len() >= 99);
        assert_eq!(back.pending_len(), idx.pending_len());
        // A loaded graph keeps drawing the same levels as the original.
        let (mut a, mut b) = (idx, back);
        a.add(vec!["x".into()], &data[1], vec![Input::Null])
            .unwrap();
        b.add(vec!["x".into()], &data[1], vec![Input::Null])
            .unwrap();
        assert_eq!(a.graph.levels, b.graph.levels);
        // And links its saved queue into the same graph.
        let queued = a.pending_len();
        assert_eq!(a.link_pending(usize::MAX), queued);
        assert_eq!(b.link_pending(usize::MAX), queued);
        assert_eq!(
            a.graph.links.level0_words().collect::<Vec<_>>(),
            b.graph.links.level0_words().collect::<Vec<_>>()
        );
        assert_eq!(a.graph.entry(), b.graph.entry());
    }

    #[test]
    fn truncated_foreign_or_other_version_files_are_corrupt() {
        let (idx, _) = sample();
        let path = temp("b.hnsw");
        save(&idx, &path, 1, "db").unwrap();
        let good = fs::read(&path).unwrap();
        let cases: Vec<Vec<u8>> = vec![
            good[..good.len() / 2].to_vec(),
            good[..10].to_vec(),
            Vec::new(),
            b"PAR1 definitely not an index".to_vec(),
            {
                let mut v = good.clone();
                v[8] = 99; // version
                v
            },
            {
                let mut v = good.clone();
                let mid = v.len() / 2;
                v[mid] ^= 0xff; // damaged body
                v
            },
        ];
        for (i, bytes) in cases.into_iter().enumerate() {
            fs::write(&path, bytes).unwrap();
            assert!(
                matches!(load(&path), Err(CoreError::IndexCorrupt(_))),
                "case {i}"
            );
        }
    }

    #[test]
    fn empty_index_round_trips_and_missing_file_is_an_io_error() {
        let idx = VectorIndex::new(3, Metric::Cosine, 16, 200, 0).unwrap();
        let path = temp("c.hnsw");
        save(&idx, &path, 0, "db").unwrap();
        let (back, _, _) = load(&path).unwrap();
        assert!(back.is_empty());
        assert!(matches!(load(&temp("missing.hnsw")), Err(CoreError::Io(_))));
    }
}
