use super::load::read_header;
use super::*;
use crate::distance::Metric;
use crate::filter::{Filter, Input};
use crate::vector::graph::tests::clustered;

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("threadrecall-persist-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn full_save(index: &mut VectorIndex, path: &Path, generation: u64, origin: &str) {
    let written = save(index, path, generation, origin).unwrap();
    finish(index, written).unwrap();
}

#[test]
fn a_failed_write_leaves_no_file() {
    let path = temp("occupied.hnsw");
    fs::create_dir_all(&path).unwrap(); // a directory: the final rename fails
    assert!(matches!(write(&path, b"bytes"), Err(CoreError::Io(_))));
    assert!(!temp("occupied.hnsw.tmp").exists());
    assert!(path.is_dir());
}

fn metas(range: std::ops::Range<usize>) -> Vec<Input> {
    range
        .map(|i| {
            Input::Map(vec![
                ("thread_id".into(), Input::Str(format!("t{}", i % 9))),
                ("score".into(), Input::Float(i as f64 / 3.0)),
                ("flag".into(), Input::Bool(i % 2 == 0)),
                ("none".into(), Input::Null),
                ("nested".into(), Input::List(vec![])),
            ])
        })
        .collect()
}

fn sample() -> (VectorIndex, Vec<Vec<f32>>) {
    // seed 31
    let data = clustered(31, 700, 12, 7);
    let mut idx = VectorIndex::new(12, Metric::Euclidean, 8, 60, 5).unwrap();
    let ids = (0..700).map(|i| format!("id-{i}")).collect();
    let flat: Vec<f32> = data.iter().flatten().copied().collect();
    idx.add(ids, &flat, metas(0..700)).unwrap();
    idx.link_pending(600);
    idx.remove(&["id-5".to_string(), "id-6".to_string(), "id-650".to_string()]);
    (idx, data)
}

fn same_answers(a: &VectorIndex, b: &VectorIndex, queries: &[Vec<f32>]) {
    assert_eq!(a.len(), b.len());
    assert_eq!(a.ids(), b.ids());
    assert_eq!(a.pending_len(), b.pending_len());
    let f = Filter::vector(&Input::Map(vec![("flag".into(), Input::Bool(true))])).unwrap();
    for q in queries {
        assert_eq!(
            a.search(q, 10, None, Some(32)).unwrap(),
            b.search(q, 10, None, Some(32)).unwrap()
        );
        assert_eq!(
            a.search(q, 5, f.as_ref(), None).unwrap(),
            b.search(q, 5, f.as_ref(), None).unwrap()
        );
    }
}

#[test]
fn save_then_load_gives_identical_results() {
    let (mut idx, data) = sample();
    let path = temp("a.hnsw");
    full_save(&mut idx, &path, 42, "db-1");
    let (back, generation, origin) = load(&path).unwrap();
    assert_eq!((generation, &*origin), (42, "db-1"));
    same_answers(
        &idx,
        &back,
        &data.iter().step_by(37).cloned().collect::<Vec<_>>(),
    );
    assert!(!back.contains("id-5"));
    assert!(!back.contains("id-650"));
    assert!(idx.pending_len() >= 99);
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
fn a_save_between_a_parallel_link_and_its_finish_records_the_batch_as_linked() {
    // Linked on threads under a read hold, a batch leaves the queue only under the next write
    // hold; a save in between (a reader too) sees it linked, entry point included, but queued.
    let data = clustered(33, 400, 12, 5);
    let mut idx = VectorIndex::new(12, Metric::Euclidean, 8, 60, 5).unwrap();
    let flat: Vec<f32> = data.iter().flatten().copied().collect();
    idx.add(
        (0..400).map(|i| format!("id-{i}")).collect(),
        &flat,
        metas(0..400),
    )
    .unwrap();
    idx.link_pending(1);
    let batch = idx.link_batch(250, 2);
    assert_eq!((batch.len(), idx.pending_len()), (250, 399));
    let path = temp("mid-batch.hnsw");
    let written = save(&idx, &path, 7, "db-1").unwrap();
    assert_eq!(written.pending, 149);
    idx.finish_batch(&batch);
    finish(&mut idx, written).unwrap();
    let (back, _, _) = load(&path).unwrap();
    assert_eq!(back.pending_len(), 149);
    same_answers(
        &idx,
        &back,
        &data.iter().step_by(23).cloned().collect::<Vec<_>>(),
    );
}

#[test]
fn a_loaded_index_scores_with_the_exact_float_vectors() {
    let (mut idx, data) = sample();
    let path = temp("exact.hnsw");
    full_save(&mut idx, &path, 1, "db");
    let (back, _, _) = load(&path).unwrap();
    assert_eq!(
        back.graph.originals.stored(),
        700,
        "every row is read from the file"
    );
    for q in data.iter().step_by(50) {
        for hit in back.search(q, 5, None, None).unwrap() {
            let i: usize = hit.id[3..].parse().unwrap();
            let want = Metric::Euclidean.score(Metric::Euclidean.distance(q, &data[i]));
            assert_eq!(hit.score, want);
        }
    }
}

/// `n` clustered 12-d vectors (seed `seed`), linked and saved to the temporary file `name`.
fn saved_clustered(
    seed: u64,
    n: usize,
    metric: Metric,
    name: &str,
) -> (Vec<Vec<f32>>, VectorIndex, PathBuf) {
    let data = clustered(seed, n, 12, 7);
    let mut idx = VectorIndex::new(12, metric, 8, 60, 5).unwrap();
    let flat: Vec<f32> = data.iter().flatten().copied().collect();
    idx.add(
        (0..n).map(|i| format!("id-{i}")).collect(),
        &flat,
        metas(0..n),
    )
    .unwrap();
    idx.link_pending(n);
    let path = temp(name);
    full_save(&mut idx, &path, 1, "db");
    (data, idx, path)
}

#[test]
fn a_small_index_keeps_its_rows_in_memory_and_a_larger_one_reads_them_from_its_file() {
    // In tests an index keeps its rows while they take 32 kB: 600 x 12 floats do, 700 do not.
    for (n, held) in [(600, true), (700, false)] {
        let (data, idx, path) =
            saved_clustered(31, n, Metric::Euclidean, &format!("held-{n}.hnsw"));
        let (back, _, _) = load(&path).unwrap();
        for index in [&idx, &back] {
            let originals = &index.graph.originals;
            assert_eq!(originals.stored(), n, "the file holds every row");
            assert_eq!(originals.in_memory(), if held { n } else { 0 });
            for q in data.iter().step_by(50) {
                for hit in index.search(q, 5, None, None).unwrap() {
                    let i: usize = hit.id[3..].parse().unwrap();
                    let want = Metric::Euclidean.score(Metric::Euclidean.distance(q, &data[i]));
                    assert_eq!(hit.score, want);
                }
            }
        }
        for slot in (0..n as u32).step_by(7) {
            let (a, b) = (&idx.graph.originals, &back.graph.originals);
            assert_eq!(a.get(slot).unwrap(), b.get(slot).unwrap());
        }
        // What is kept was read from the file: a damaged row is still found at load.
        let vectors = vectors_path(&path);
        let mut bytes = fs::read(&vectors).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0x40;
        fs::write(&vectors, bytes).unwrap();
        assert!(matches!(load(&path), Err(CoreError::IndexCorrupt(_))));
    }
}

#[test]
fn an_index_told_to_hold_its_vectors_keeps_every_row_and_answers_the_same() {
    // 700 x 12 floats are past the tests' 32 kB: unheld, a loaded index reads them from its file.
    let n = 700;
    let (data, _, path) = saved_clustered(32, n, Metric::Cosine, "hold-all.hnsw");
    let (plain, _, _) = load(&path).unwrap();
    let (mut held, _, _) = load(&path).unwrap();
    assert_eq!(held.graph.originals.in_memory(), 0);
    held.hold_vectors(true).unwrap();
    assert_eq!(held.graph.originals.in_memory(), n, "every row read in");
    for slot in (0..n as u32).step_by(7) {
        let (a, b) = (&plain.graph.originals, &held.graph.originals);
        assert_eq!(a.get(slot).unwrap(), b.get(slot).unwrap());
    }
    let filter = Filter::vector(&Input::Map(vec![(
        "thread_id".into(),
        Input::Str("t4".into()),
    )]))
    .unwrap()
    .unwrap();
    for q in data.iter().step_by(25) {
        for f in [None, Some(&filter)] {
            let (a, b) = (
                plain.search(q, 5, f, None).unwrap(),
                held.search(q, 5, f, None).unwrap(),
            );
            let pairs = |hits: Vec<crate::vector::Hit>| {
                hits.into_iter()
                    .map(|h| (h.id, h.score))
                    .collect::<Vec<_>>()
            };
            assert_eq!(pairs(a), pairs(b), "the same hits and exact scores");
        }
    }
    // New rows stay, and so does the setting through a compaction: 800 rows are past the
    // tests' 32 kB, so a store not told to hold them would drop them once written.
    let more: Vec<f32> = clustered(33, 300, 12, 7).into_iter().flatten().collect();
    held.add(
        (0..300).map(|i| format!("new-{i}")).collect(),
        &more,
        metas(0..300),
    )
    .unwrap();
    held.remove(
        &(0..600)
            .step_by(3)
            .map(|i| format!("id-{i}"))
            .collect::<Vec<_>>(),
    );
    held.compact();
    let originals = &mut held.graph.originals;
    assert_eq!(originals.len(), 800, "compacted");
    originals.spill().unwrap();
    assert_eq!(originals.stored(), 800);
    assert_eq!(originals.in_memory(), 800);
    held.hold_vectors(false).unwrap();
    assert_eq!(
        held.graph.originals.in_memory(),
        0,
        "the file's rows dropped"
    );
}

#[test]
fn a_small_change_appends_about_its_size_and_reloads_equal() {
    let (mut idx, data) = sample();
    let path = temp("append.hnsw");
    full_save(&mut idx, &path, 1, "db");
    let (index_len, vectors_len) = (
        fs::metadata(&path).unwrap().len(),
        fs::metadata(vectors_path(&path)).unwrap().len(),
    );
    // Ten new vectors (one replacing an old id), two deletions, some linking.
    let flat: Vec<f32> = data[..10].iter().flatten().copied().collect();
    let mut ids: Vec<String> = (0..9).map(|i| format!("new-{i}")).collect();
    ids.push("id-100".into());
    idx.add(ids, &flat, metas(0..10)).unwrap();
    idx.remove(&["id-7".to_string(), "id-8".to_string()]);
    idx.link_pending(20);
    full_save(&mut idx, &path, 2, "db");
    let grown = fs::metadata(&path).unwrap().len() - index_len;
    let grown_vectors = fs::metadata(vectors_path(&path)).unwrap().len() - vectors_len;
    assert_eq!(grown_vectors, 10 * 12 * 4, "the new rows only");
    assert!(
        grown < index_len / 4,
        "appended {grown} bytes to a file of {index_len}"
    );
    let (back, generation, _) = load(&path).unwrap();
    assert_eq!(generation, 2);
    same_answers(
        &idx,
        &back,
        &data.iter().step_by(29).cloned().collect::<Vec<_>>(),
    );
    assert!(!back.contains("id-7") && back.contains("new-3") && back.contains("id-100"));
    // Saved again with nothing changed: one small frame.
    full_save(&mut idx, &path, 3, "db");
    let (again, generation, _) = load(&path).unwrap();
    assert_eq!(generation, 3);
    same_answers(&idx, &again, &data[..5]);
}

#[test]
fn lists_changed_by_many_saves_load_as_the_last_save_left_them() {
    let (mut idx, data) = sample();
    let path = temp("many.hnsw");
    full_save(&mut idx, &path, 1, "db");
    // Each round adds vectors and links them (changing older slots' lists and parents), deletes
    // a few, and appends a frame; the last leaves some vectors waiting.
    for round in 0..6 {
        let at = 40 * round;
        let flat: Vec<f32> = data[at..at + 40].iter().flatten().copied().collect();
        let ids = (0..40).map(|i| format!("r{round}-{i}")).collect();
        idx.add(ids, &flat, metas(at..at + 40)).unwrap();
        idx.link_pending(if round == 5 { 100 } else { usize::MAX });
        idx.remove(&[format!("id-{}", 100 + round), format!("r{round}-3")]);
        full_save(&mut idx, &path, 2 + round as u64, "db");
    }
    let (back, generation, _) = load(&path).unwrap();
    assert_eq!(generation, 7);
    let (a, b) = (&idx.graph, &back.graph);
    assert_eq!(a.slots(), b.slots());
    for slot in 0..a.slots() as u32 {
        assert_eq!(
            a.links.slot_words(slot).collect::<Vec<_>>(),
            b.links.slot_words(slot).collect::<Vec<_>>(),
            "lists of slot {slot}"
        );
        assert_eq!(
            a.links.parent(slot),
            b.links.parent(slot),
            "parent of {slot}"
        );
        assert_eq!(a.links.indegree(slot), b.links.indegree(slot));
        assert_eq!(a.is_deleted(slot), b.is_deleted(slot));
    }
    assert_eq!(a.entry(), b.entry());
    same_answers(&idx, &back, &data[..20]);
}

#[test]
fn an_incomplete_last_frame_takes_the_index_back_to_the_save_before() {
    let (mut idx, data) = sample();
    let path = temp("torn.hnsw");
    full_save(&mut idx, &path, 1, "db");
    let first = fs::read(&path).unwrap();
    let (before, _, _) = load(&path).unwrap();
    let flat: Vec<f32> = data[..3].iter().flatten().copied().collect();
    idx.add(
        (0..3).map(|i| format!("late-{i}")).collect(),
        &flat,
        metas(0..3),
    )
    .unwrap();
    full_save(&mut idx, &path, 2, "db");
    let full = fs::read(&path).unwrap();
    for cut in [
        full.len() - 1,
        first.len() + 9,
        first.len() + (full.len() - first.len()) / 2,
    ] {
        fs::write(&path, &full[..cut]).unwrap();
        let (back, generation, _) = load(&path).unwrap();
        assert_eq!(generation, 1, "cut at {cut}");
        assert!(!back.contains("late-0"));
        same_answers(&before, &back, &data[..3]);
    }
    // A last frame damaged inside (its decoding runs beside its checksum), in a count or
    // elsewhere, counts for nothing either.
    for at in [20, 43, (full.len() - first.len()) / 2] {
        let mut damaged = full.clone();
        damaged[first.len() + at] ^= 0xff;
        fs::write(&path, &damaged).unwrap();
        let (back, generation, _) = load(&path).unwrap();
        assert_eq!(generation, 1, "damaged at {at}");
        assert!(!back.contains("late-0"));
        same_answers(&before, &back, &data[..3]);
    }
    // The next save of the reloaded index starts the files over.
    fs::write(&path, &full[..full.len() - 1]).unwrap();
    let (mut back, _, _) = load(&path).unwrap();
    full_save(&mut back, &path, 5, "db");
    assert_eq!(load(&path).unwrap().1, 5);
}

#[test]
fn truncated_foreign_or_other_version_files_are_corrupt() {
    let (mut idx, _) = sample();
    let path = temp("b.hnsw");
    full_save(&mut idx, &path, 1, "db");
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
        {
            let mut v = good.clone();
            v[14] ^= 0x01; // damaged header
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
fn a_foreign_damaged_truncated_or_missing_vectors_file_is_corrupt() {
    let (mut idx, data) = sample();
    let path = temp("v.hnsw");
    full_save(&mut idx, &path, 1, "db");
    let vectors = vectors_path(&path);
    let good = fs::read(&vectors).unwrap();
    // Another index of the same shape, saved elsewhere: its vectors file is foreign here.
    let mut other = VectorIndex::new(12, Metric::Euclidean, 8, 60, 5).unwrap();
    let flat: Vec<f32> = data.iter().rev().flatten().copied().collect();
    other
        .add(
            (0..700).map(|i| format!("id-{i}")).collect(),
            &flat,
            metas(0..700),
        )
        .unwrap();
    let elsewhere = temp("other.hnsw");
    full_save(&mut other, &elsewhere, 1, "db");
    let foreign = fs::read(vectors_path(&elsewhere)).unwrap();
    let header = originals::HEADER_LEN as usize;
    let cases: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("foreign", Some(foreign)),
        ("truncated", Some(good[..good.len() - 4].to_vec())),
        ("header only", Some(good[..header].to_vec())),
        ("empty", Some(Vec::new())),
        (
            "damaged header",
            Some({
                let mut v = good.clone();
                v[12] ^= 0x10;
                v
            }),
        ),
        (
            "damaged first row",
            Some({
                let mut v = good.clone();
                v[header + 2] ^= 0x40;
                v
            }),
        ),
        (
            "damaged last row",
            Some({
                let mut v = good.clone();
                let at = v.len() - 7;
                v[at] ^= 0x40;
                v
            }),
        ),
        ("missing", None),
    ];
    for (label, bytes) in cases {
        match bytes {
            Some(b) => fs::write(&vectors, b).unwrap(),
            None => fs::remove_file(&vectors).unwrap(),
        }
        assert!(
            matches!(load(&path), Err(CoreError::IndexCorrupt(_))),
            "{label}"
        );
    }
    fs::write(&vectors, &good).unwrap();
    assert!(load(&path).is_ok());
}

#[test]
fn a_compacted_index_is_saved_whole_again() {
    let (mut idx, data) = sample();
    let path = temp("compact.hnsw");
    full_save(&mut idx, &path, 1, "db");
    let gone: Vec<String> = (0..700).step_by(2).map(|i| format!("id-{i}")).collect();
    idx.remove(&gone);
    assert!(idx.slots() < 700, "compaction ran");
    full_save(&mut idx, &path, 2, "db");
    let (back, generation, _) = load(&path).unwrap();
    assert_eq!(generation, 2);
    same_answers(&idx, &back, &data[..20]);
}

#[test]
fn empty_index_round_trips_and_missing_file_is_an_io_error() {
    let mut idx = VectorIndex::new(3, Metric::Cosine, 16, 200, 0).unwrap();
    let path = temp("c.hnsw");
    full_save(&mut idx, &path, 0, "db");
    let (back, _, _) = load(&path).unwrap();
    assert!(back.is_empty());
    assert!(matches!(load(&temp("missing.hnsw")), Err(CoreError::Io(_))));
}

#[test]
fn a_saved_index_carries_its_measured_breadths() {
    let (mut idx, _) = sample();
    let path = temp("breadth.hnsw");
    full_save(&mut idx, &path, 1, "db");
    let (measured, _) = idx.graph.measured_breadths();
    assert!(
        measured.iter().any(|m| m[0] == DEFAULT_K as u64),
        "{measured:?}"
    );
    let (back, _, _) = load(&path).unwrap();
    assert_eq!(back.graph.measured_breadths().0, measured);
    assert!(!outdated(&back));
    // A breadth measured after the load makes the file outdated; the next save keeps it.
    back.graph.default_ef(7, EF_DEFAULT, None);
    assert!(outdated(&back));
    let mut back = back;
    full_save(&mut back, &path, 1, "db");
    assert!(!outdated(&back));
    let (again, _, _) = load(&path).unwrap();
    let kept = again.graph.measured_breadths().0;
    assert!(kept.iter().any(|m| m[0] == 7) && kept.iter().any(|m| m[0] == 10));
}

/// `bytes` of a current file holding one frame, as the previous version wrote it: its
/// version in the header, its frame without the metadata texts it ends with.
fn as_previous_version(bytes: &[u8]) -> Vec<u8> {
    let (_, _, _, _, start) = read_header(bytes).unwrap();
    let mut old = bytes[..start - 8].to_vec();
    old[8..12].copy_from_slice(&PREVIOUS_VERSION.to_le_bytes());
    let sum = checksum(&old);
    old.extend_from_slice(&sum.to_le_bytes());
    let len = u64::from_le_bytes(bytes[start..start + 8].try_into().unwrap()) as usize;
    let payload = &bytes[start + 8..start + 8 + len];
    let texts = u64::from_le_bytes(payload[len - 8..].try_into().unwrap()) as usize;
    let frame = &payload[..len - 8 - texts];
    old.extend_from_slice(&(frame.len() as u64).to_le_bytes());
    old.extend_from_slice(frame);
    old.extend_from_slice(&checksum(frame).to_le_bytes());
    old
}

/// The metadata text of each of `n` vectors (one of them not ASCII).
fn texts(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!(r#"{{"n": {i}, "w": "é{i}"}}"#))
        .collect()
}

#[test]
fn metadata_texts_are_saved_with_their_slots_and_survive_a_compaction() {
    let data = clustered(34, 600, 12, 7);
    let mut idx = VectorIndex::new(12, Metric::Cosine, 8, 60, 5).unwrap();
    let flat: Vec<f32> = data.iter().flatten().copied().collect();
    let ids: Vec<String> = (0..600).map(|i| format!("id-{i}")).collect();
    let mut given = texts(600);
    given[7] = String::new(); // none for this one
    idx.add_stored(ids.clone(), &flat, metas(0..600), Some(given.clone()))
        .unwrap();
    let text_of = |ix: &VectorIndex, id: &str| ix.texts.get(ix.slot(id).unwrap()).map(String::from);
    let path = temp("texts.hnsw");
    full_save(&mut idx, &path, 1, "db");
    // Appended: a second frame with a replaced vector's new text.
    idx.add_stored(
        vec!["id-3".into()],
        &flat[..12],
        metas(0..1),
        Some(vec!["{}".into()]),
    )
    .unwrap();
    full_save(&mut idx, &path, 2, "db");
    let (back, _, _) = load(&path).unwrap();
    for (i, id) in ids.iter().enumerate() {
        let want = match i {
            3 => Some("{}".to_string()),
            7 => None,
            _ => Some(given[i].clone()),
        };
        assert_eq!(text_of(&back, id), want, "{id}");
    }
    assert_eq!(back.texts_missing(), 1);
    // A compaction numbers the slots anew; each id keeps its text.
    let mut back = back;
    let gone: Vec<String> = ids[300..600].to_vec();
    back.remove(&gone);
    assert!(back.slots() < 601, "compaction ran");
    assert_eq!(text_of(&back, "id-3").as_deref(), Some("{}"));
    assert_eq!(text_of(&back, "id-50"), Some(given[50].clone()));
}

#[test]
fn a_file_of_the_previous_version_loads_without_texts_and_is_then_saved_whole() {
    // 200 vectors: too few to measure a breadth, so the frame holds none.
    let data = clustered(33, 200, 12, 7);
    let mut idx = VectorIndex::new(12, Metric::Cosine, 8, 60, 5).unwrap();
    let flat: Vec<f32> = data.iter().flatten().copied().collect();
    let ids: Vec<String> = (0..200).map(|i| format!("id-{i}")).collect();
    idx.add_stored(ids.clone(), &flat, metas(0..200), Some(texts(200)))
        .unwrap();
    idx.link_pending(150);
    let path = temp("previous.hnsw");
    full_save(&mut idx, &path, 4, "db");
    fs::write(&path, as_previous_version(&fs::read(&path).unwrap())).unwrap();
    let (mut back, generation, _) = load(&path).unwrap();
    assert_eq!(generation, 4);
    same_answers(&idx, &back, &data[..10]);
    assert_eq!(back.texts_missing(), 200);
    back.fill_texts(&ids[..150], &texts(150)).unwrap();
    assert_eq!(back.texts_missing(), 50);
    assert!(outdated(&back), "to be rewritten in the current version");
    full_save(&mut back, &path, 5, "db");
    let bytes = fs::read(&path).unwrap();
    assert_eq!(bytes[8..12], FORMAT_VERSION.to_le_bytes());
    let (again, generation, _) = load(&path).unwrap();
    assert_eq!(generation, 5);
    assert!(!outdated(&again));
    assert_eq!(again.texts_missing(), 50);
    let slot = again.slot("id-149").unwrap();
    assert_eq!(again.texts.get(slot), Some(texts(150)[149].as_str()));
    same_answers(&idx, &again, &data[..10]);
}
