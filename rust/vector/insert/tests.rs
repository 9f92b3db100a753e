use crate::distance::Metric;
use crate::vector::graph::tests::{clustered, exact};
use crate::vector::graph::{Graph, Params};

fn queued_graph(metric: Metric, data: &[Vec<f32>], m: usize) -> Graph {
    let mut g = Graph::new(Params::new(data[0].len(), metric, m, 100, 7).unwrap());
    for v in data {
        g.push(v);
    }
    g
}

/// Links everything: the first slot alone, the rest in parallel batches of `batch`.
fn link_in_parallel(g: &mut Graph, threads: usize, batch: usize) {
    g.link_pending(1);
    loop {
        let done = g.link_batch(batch, threads);
        if done.is_empty() {
            break;
        }
        g.finish_batch(&done);
    }
}

/// Slots a level-0 walk from the entry point reaches.
fn reachable(g: &Graph) -> usize {
    let mut seen = vec![false; g.slots()];
    let mut stack = vec![g.entry()];
    seen[g.entry() as usize] = true;
    while let Some(s) = stack.pop() {
        for n in g.links.list(s, 0) {
            if !std::mem::replace(&mut seen[n as usize], true) {
                stack.push(n);
            }
        }
    }
    seen.iter().filter(|s| **s).count()
}

fn recall_at_10(g: &Graph, queries: &[Vec<f32>]) -> f64 {
    let mut hits = 0;
    for q in queries {
        let mut q = q.clone();
        g.params().metric.prepare(&mut q);
        let truth = exact(g, &q, 10);
        let got = g.search(&q, 10, 64, |_| true);
        hits += got.iter().filter(|n| truth.contains(&n.slot)).count();
    }
    hits as f64 / (queries.len() * 10) as f64
}

#[test]
fn parallel_batches_build_a_graph_as_good_as_one_at_a_time() {
    // seed 21 for data, 22 for queries.
    let data = clustered(21, 4000, 32, 40);
    let queries = clustered(22, 400, 32, 40);
    let mut one_at_a_time = queued_graph(Metric::Cosine, &data, 16);
    one_at_a_time.link_pending(usize::MAX);
    let baseline = recall_at_10(&one_at_a_time, &queries);
    assert!(baseline >= 0.95, "one at a time: recall {baseline}");
    for threads in [1, 2, 4] {
        // Threads interleave differently on every run, so the graph differs a little from
        // run to run: every build must be sound, and the median of three builds must reach
        // the (deterministic) sequential build's recall, with a small margin.
        let mut recalls: Vec<f64> = (0..3)
            .map(|_| {
                let mut g = queued_graph(Metric::Cosine, &data, 16);
                link_in_parallel(&mut g, threads, 1000);
                assert_eq!(g.pending().count(), 0);
                assert!(g.validate().is_ok());
                assert_eq!(reachable(&g), 4000, "{threads} threads");
                recall_at_10(&g, &queries)
            })
            .collect();
        recalls.sort_by(f64::total_cmp);
        assert!(
            recalls[1] >= baseline - 0.01,
            "{threads} threads: recalls {recalls:?}, one at a time {baseline}"
        );
    }
}

#[test]
fn a_batch_being_linked_is_never_collected_by_a_search() {
    // seed 23: the batch is linked but not finished; searches must leave it to the
    // caller's exact scan of the queue.
    let data = clustered(23, 2000, 16, 10);
    let mut g = queued_graph(Metric::Euclidean, &data, 8);
    g.link_pending(1000);
    let batch = g.link_batch(usize::MAX, 2);
    assert_eq!(batch.len(), 1000);
    for q in data.iter().skip(1000).step_by(50) {
        assert!(g.search(q, 10, 64, |_| true).iter().all(|n| n.slot < 1000));
    }
    g.finish_batch(&batch);
    assert_eq!(g.pending().count(), 0);
    let hits = g.search(&data[1500], 1, 64, |_| true);
    assert_eq!(hits[0].slot, 1500);
}

#[test]
fn many_identical_vectors_stay_reachable() {
    // seed 24: 400 copies of one vector among 1,600 others, linked one at a time and in
    // parallel; every slot must stay reachable from the entry point.
    let mut data = clustered(24, 1600, 16, 16);
    let copy = data[5].clone();
    for i in 0..400 {
        data.insert(i * 4, copy.clone());
    }
    for parallel in [false, true] {
        let mut g = queued_graph(Metric::Cosine, &data, 8);
        if parallel {
            link_in_parallel(&mut g, 2, 500);
        } else {
            g.link_pending(usize::MAX);
        }
        assert_eq!(reachable(&g), data.len(), "parallel: {parallel}");
    }
}

#[test]
fn each_near_duplicate_finds_itself() {
    // seed 25: 200 vectors sharing one base, each moved along its own direction (cosine
    // about 0.97 to each other, as short texts differing by one word), among 3,000 others;
    // each one's own vector must come first.
    let others = clustered(25, 3000, 64, 30);
    let base = others[0].clone();
    let near: Vec<Vec<f32>> = (0..200)
        .map(|i| {
            let mut v = base.clone();
            let group = i / 64;
            let sign = if group % 2 == 0 { 1.0 } else { -1.0 };
            v[i % 64] += sign * (1.0 + 0.5 * group as f32);
            v[(i * 7 + 3) % 64] += 0.3;
            v
        })
        .collect();
    let data: Vec<Vec<f32>> = others.iter().chain(&near).cloned().collect();
    for parallel in [false, true] {
        let mut g = queued_graph(Metric::Cosine, &data, 16);
        if parallel {
            link_in_parallel(&mut g, 2, 1000);
        } else {
            g.link_pending(usize::MAX);
        }
        let mut found = 0;
        for (i, v) in near.iter().enumerate() {
            let mut q = v.clone();
            Metric::Cosine.prepare(&mut q);
            let hits = g.search(&q, 1, 64, |_| true);
            found += (hits[0].slot as usize == 3000 + i) as usize;
        }
        assert_eq!(found, 200, "parallel: {parallel}");
    }
}

#[test]
fn linking_stopped_between_batches_and_resumed_builds_as_good_a_graph() {
    // seed 23 for data, 24 for queries.
    let data = clustered(23, 3000, 32, 30);
    let queries = clustered(24, 300, 32, 30);
    let mut whole = queued_graph(Metric::Cosine, &data, 16);
    link_in_parallel(&mut whole, 2, 256);
    let baseline = recall_at_10(&whole, &queries);

    let mut g = queued_graph(Metric::Cosine, &data, 16);
    g.link_pending(1);
    for _ in 0..3 {
        let done = g.link_batch(256, 2);
        g.finish_batch(&done);
    }
    // Stopped here: every slot is either in the graph or still waiting, nothing in between.
    assert!(g.validate().is_ok());
    assert_eq!(g.pending().count(), 3000 - 1 - 3 * 256);
    assert_eq!(reachable(&g), 1 + 3 * 256);
    link_in_parallel(&mut g, 2, 256);
    assert_eq!(g.pending().count(), 0);
    assert!(g.validate().is_ok());
    assert_eq!(reachable(&g), 3000);
    let resumed = recall_at_10(&g, &queries);
    assert!(
        resumed >= baseline - 0.02,
        "resumed {resumed}, in one go {baseline}"
    );
}

#[test]
fn slots_linked_side_by_side_keep_their_neighbours_and_find_themselves() {
    // seed 53: points spread evenly, no two near each other. A slot's walk that reached a
    // neighbour linked beside it before that neighbour had its level-0 list came back with
    // that neighbour alone, and the slot was then reachable through that one list only.
    let data = clustered(53, 20_000, 16, 20_000);
    for _ in 0..2 {
        let mut g = queued_graph(Metric::Cosine, &data, 16);
        link_in_parallel(&mut g, 4, 8192);
        let thinnest = (0..g.slots() as u32)
            .map(|s| g.links.list(s, 0).count())
            .min();
        assert!(thinnest >= Some(8), "a level-0 list of {thinnest:?}");
        let lost: Vec<usize> = (0..data.len())
            .filter(|&i| {
                let mut q = data[i].clone();
                g.params().metric.prepare(&mut q);
                g.search(&q, 1, 64, |_| true)[0].slot != i as u32
            })
            .collect();
        assert!(
            lost.is_empty(),
            "not found from their own vectors: {lost:?}"
        );
    }
}
