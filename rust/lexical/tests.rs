use super::search::Walk;
use super::*;

const PLAIN: Tokenizer = Tokenizer {
    stem: false,
    stop_words: false,
};

/// BM25 by its definition (k1 1.2, b 0.75) over the texts of `(id, thread, resource,
/// text)` rows, for one query.
struct Oracle {
    docs: Vec<Vec<String>>,
    terms: Vec<String>,
    avg: f32,
}

impl Oracle {
    fn new(rows: &[(&str, &str, &str, &str)], query: &str) -> Oracle {
        let docs: Vec<Vec<String>> = rows.iter().map(|r| PLAIN.tokens(r.3)).collect();
        let avg = docs.iter().map(Vec::len).sum::<usize>() as f32 / docs.len() as f32;
        let mut terms = PLAIN.tokens(query);
        terms.sort();
        terms.dedup();
        Oracle { docs, terms, avg }
    }

    /// The score of `doc` (any token list) against an average length of `avg`.
    fn score(&self, doc: &[String], avg: f32) -> f32 {
        let (k1, b) = (1.2f32, 0.75f32);
        let n = self.docs.len() as f32;
        let mut score = 0.0f32;
        for term in &self.terms {
            let tf = doc.iter().filter(|t| *t == term).count() as f32;
            if tf > 0.0 {
                let df = self.docs.iter().filter(|d| d.contains(term)).count() as f32;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                score += idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * doc.len() as f32 / avg));
            }
        }
        score
    }
}

/// Rows with a positive score (idf is positive, so: sharing a query term), best first.
fn ranked(scored: Vec<(String, f32)>) -> Vec<(String, f32)> {
    let mut out: Vec<(String, f32)> = scored.into_iter().filter(|r| r.1 > 0.0).collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// BM25 from the definition, restricted to `scope`.
fn naive(rows: &[(&str, &str, &str, &str)], query: &str, scope: Scope<'_>) -> Vec<(String, f32)> {
    let o = Oracle::new(rows, query);
    let in_scope = |row: &(&str, &str, &str, &str)| match scope {
        Scope::All => true,
        Scope::Thread(t) => row.1 == t,
        Scope::Resource(r) => row.2 == r,
    };
    ranked(
        rows.iter()
            .zip(&o.docs)
            .filter(|(row, _)| in_scope(row))
            .map(|(row, doc)| (row.0.to_string(), o.score(doc, o.avg)))
            .collect(),
    )
}

/// Upserts `(id, thread, resource, text)` rows, each row's position its order.
fn upsert_in_order(index: &mut LexicalIndex, rows: &[(&str, &str, &str, &str)]) {
    for (i, row) in rows.iter().enumerate() {
        index.upsert(row.0, row.1, Some(row.2), i as i64, row.3);
    }
}

fn index_of(rows: &[(&str, &str, &str, &str)]) -> LexicalIndex {
    let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, 0, 0.0);
    for (id, thread, resource, text) in rows {
        index.upsert(id, thread, Some(resource), 0, text);
    }
    index
}

fn assert_same(got: &[(String, f32)], want: &[(String, f32)]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g.1 - w.1).abs() < 1e-4, "{got:?} vs {want:?}");
    }
    let mut g: Vec<&str> = got.iter().map(|x| x.0.as_str()).collect();
    let mut w: Vec<&str> = want.iter().map(|x| x.0.as_str()).collect();
    g.sort();
    w.sort();
    assert_eq!(g, w);
}

const ROWS: &[(&str, &str, &str, &str)] = &[
    ("m1", "t1", "r1", "I adopted a dog named Rex last week"),
    (
        "m2",
        "t1",
        "r1",
        "The dog loves the park, the park loves the dog",
    ),
    ("m3", "t2", "r1", "We went camping by the lake"),
    ("m4", "t3", "r2", "My cat hates the dog next door"),
    ("m5", "t3", "r2", "Pottery class on Tuesday was fun"),
    (
        "m6",
        "t4",
        "r2",
        "Camping trip to the mountains, then the lake again",
    ),
];

#[test]
fn scores_match_the_definition() {
    let index = index_of(ROWS);
    for query in [
        "dog",
        "the dog park",
        "camping lake",
        "pottery Tuesday",
        "nothing here",
    ] {
        for scope in [
            Scope::All,
            Scope::Resource("r1"),
            Scope::Resource("r2"),
            Scope::Thread("t3"),
        ] {
            for walk in [None, Some(Walk::Postings), Some(Walk::Documents)] {
                let got = index.search_by(query, 10, scope, walk);
                assert_same(&got, &naive(ROWS, query, scope));
            }
        }
    }
}

#[test]
fn top_k_is_the_best_k_in_order() {
    let index = index_of(ROWS);
    let all = index.search("the dog lake camping", 10, Scope::All);
    let two = index.search("the dog lake camping", 2, Scope::All);
    assert_eq!(two, all[..2].to_vec());
    assert!(all.windows(2).all(|w| w[0].1 >= w[1].1));
}

#[test]
fn unknown_scope_or_zero_k_returns_nothing() {
    let index = index_of(ROWS);
    assert!(index.search("dog", 5, Scope::Thread("nope")).is_empty());
    assert!(index.search("dog", 5, Scope::Resource("nope")).is_empty());
    assert!(index.search("dog", 0, Scope::All).is_empty());
}

#[test]
fn removal_and_update_match_a_fresh_index() {
    let mut index = index_of(ROWS);
    assert_eq!(index.remove(["m2", "missing"]), 1);
    index.upsert("m3", "t2", Some("r1"), 0, "A dog at the lake");
    assert_eq!(index.remove_thread("t4"), 1);
    let expected: Vec<(&str, &str, &str, &str)> = vec![
        ROWS[0],
        ("m3", "t2", "r1", "A dog at the lake"),
        ROWS[3],
        ROWS[4],
    ];
    assert_eq!(index.len(), 4);
    for query in ["dog", "lake camping", "the"] {
        for scope in [
            Scope::All,
            Scope::Resource("r1"),
            Scope::Resource("r2"),
            Scope::Thread("t2"),
            Scope::Thread("t4"),
        ] {
            for walk in [Walk::Postings, Walk::Documents] {
                let got = index.search_by(query, 10, scope, Some(walk));
                assert_same(&got, &naive(&expected, query, scope));
            }
        }
    }
}

#[test]
fn both_walks_agree_through_churn_and_sweeps() {
    let words = [
        "dog", "lake", "camping", "shelter", "noon", "beagle", "walk", "rex",
    ];
    let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, 2, 0.7);
    let mut state = 7u64;
    let mut next = |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    for step in 0..4000 {
        let id = format!("m{}", next(600));
        if next(5) == 0 {
            index.remove([id.as_str()]);
            continue;
        }
        let thread = format!("t{}", next(40));
        // A thread usually keeps its resource; now and then a message names another.
        let resource = format!(
            "r{}",
            (thread[1..].parse::<u64>().unwrap() + next(10) / 9) % 4
        );
        let text: Vec<&str> = (0..1 + next(6)).map(|_| words[next(8) as usize]).collect();
        index.upsert(&id, &thread, Some(&resource), step, &text.join(" "));
    }
    assert!(index.docs.len() < 3000, "sweeps ran"); // about 3,200 upserts
    for query in ["dog", "lake camping", "rex beagle walk", "noon"] {
        for scope in (0..4)
            .map(|r| format!("r{r}"))
            .chain((0..40).map(|t| format!("t{t}")))
        {
            let scope = if scope.starts_with('r') {
                Scope::Resource(&scope)
            } else {
                Scope::Thread(&scope)
            };
            assert_eq!(
                index.search_by(query, 20, scope, Some(Walk::Postings)),
                index.search_by(query, 20, scope, Some(Walk::Documents)),
            );
        }
    }
}

#[test]
fn sweeping_dead_postings_keeps_results() {
    let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, 0, 0.0);
    for round in 0..50 {
        for i in 0..100 {
            let text = format!("word{} common round{round}", i % 7);
            index.upsert(&format!("m{i}"), "t", Some("r"), i, &text);
        }
    }
    assert_eq!(index.len(), 100);
    let hits = index.search("word3", 100, Scope::All);
    assert_eq!(hits.len(), (0..100).filter(|i| i % 7 == 3).count());
    // 300 live postings; without sweeping there would be 15,000.
    assert!(index.postings.iter().map(Vec::len).sum::<usize>() <= 300 + 1024 + 3);
}

/// `naive` plus `w` times BM25 of each row joined with the `turns` rows before it in its
/// thread (rows are in thread order), against `turns + 1` times the average length.
fn naive_in_context(
    rows: &[(&str, &str, &str, &str)],
    query: &str,
    turns: usize,
    w: f32,
) -> Vec<(String, f32)> {
    let o = Oracle::new(rows, query);
    let context_avg = (turns + 1) as f32 * o.avg;
    let scored = rows.iter().enumerate().map(|(i, row)| {
        let mut joined = o.docs[i].clone();
        let prior = (0..i).rev().filter(|&j| rows[j].1 == row.1).take(turns);
        prior.for_each(|j| joined.extend(o.docs[j].iter().cloned()));
        let score = o.score(&o.docs[i], o.avg) + w * o.score(&joined, context_avg);
        (row.0.to_string(), score)
    });
    ranked(scored.collect())
}

#[test]
fn context_scores_match_the_definition() {
    let long: Vec<(&str, &str, &str, &str)> = vec![
        ("a1", "ta", "r", "we adopted a dog"),
        ("b1", "tb", "r", "the lake was cold"),
        ("a2", "ta", "r", "what kind of dog"),
        ("a3", "ta", "r", "a beagle from the shelter"),
        ("b2", "tb", "r", "camping by the lake again"),
        ("a4", "ta", "r", "shelter dogs are the best"),
        ("a5", "ta", "r", "we walk by the lake"),
    ];
    for rows in [ROWS, long.as_slice()] {
        for turns in [1, 2, 3] {
            let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, turns, 0.7);
            // Upserted out of order: the order argument decides each message's context.
            for (i, row) in rows.iter().enumerate().rev() {
                index.upsert(row.0, row.1, Some(row.2), i as i64, row.3);
            }
            for query in [
                "dog",
                "camping lake",
                "pottery Tuesday",
                "shelter rex",
                "nothing",
            ] {
                let got = index.search(query, 10, Scope::All);
                assert_same(&got, &naive_in_context(rows, query, turns, 0.7));
            }
        }
    }
    let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, 1, 0.7);
    upsert_in_order(&mut index, ROWS);
    // m2 follows m1 in t1, so "Rex" (only in m1) finds m2 through its context.
    let hits = index.search("rex", 10, Scope::Resource("r1"));
    assert_eq!(
        hits.iter().map(|h| h.0.as_str()).collect::<Vec<_>>(),
        ["m1", "m2"]
    );
}

#[test]
fn removing_a_message_links_its_neighbours() {
    let rows = [
        ("a", "t", "r", "we adopted a puppy"),
        ("b", "t", "r", "what breed"),
        ("c", "t", "r", "a beagle"),
    ];
    let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, 1, 0.7);
    upsert_in_order(&mut index, &rows);
    let ids = |hits: Vec<(String, f32)>| hits.into_iter().map(|h| h.0).collect::<Vec<_>>();
    assert_eq!(ids(index.search("breed", 5, Scope::All)), ["b", "c"]);
    index.remove(["b"]);
    assert_eq!(ids(index.search("puppy", 5, Scope::All)), ["a", "c"]);
    assert!(index.search("breed", 5, Scope::All).is_empty());
    let expected = [rows[0], rows[2]];
    assert_same(
        &index.search("puppy beagle", 5, Scope::All),
        &naive_in_context(&expected, "puppy beagle", 1, 0.7),
    );
}

#[test]
fn context_survives_churn_and_sweeps() {
    let rows = [
        ("a1", "ta", "r", "we adopted a dog"),
        ("a2", "ta", "r", "what kind of dog"),
        ("gone", "ta", "r", "lunch at noon"),
        ("a3", "ta", "r", "a beagle from the shelter"),
        ("a4", "ta", "r", "shelter dogs are the best"),
    ];
    let mut index = LexicalIndex::new(PLAIN, 1.2, 0.75, 2, 0.7);
    for round in 0..400 {
        upsert_in_order(&mut index, &rows);
        if round == 0 {
            index.upsert("other", "tb", Some("r"), 0, "noon lake walk");
        }
    }
    assert!(index.docs.len() < 400 * rows.len(), "sweeps ran");
    index.remove(["gone"]);
    let kept: Vec<_> = rows.iter().copied().filter(|r| r.0 != "gone").collect();
    let mut expected = kept.clone();
    expected.insert(0, ("other", "tb", "r", "noon lake walk"));
    for query in ["dog", "shelter", "beagle kind", "noon lunch"] {
        assert_same(
            &index.search(query, 10, Scope::All),
            &naive_in_context(&expected, query, 2, 0.7),
        );
    }
}
