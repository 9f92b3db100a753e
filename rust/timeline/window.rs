//! Context windows: a message with its neighbours, and each message's adjacent ids.

use super::{Key, RowRef, Timeline};

/// A context-window request: a message and how many neighbours to bring on each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Include<'a> {
    pub id: &'a str,
    pub before: usize,
    pub after: usize,
}

impl Timeline {
    /// Each include's message plus up to `before`/`after` neighbours from its own thread,
    /// de-duplicated and sorted by `(created_at, seq)`. With `resource_id`, targets of other
    /// resources are skipped and neighbours are counted among the thread's messages of that
    /// resource only. Unknown ids are skipped.
    pub fn window(&self, includes: &[Include], resource_id: Option<&str>) -> Vec<RowRef<'_>> {
        let Some(scope) = self.scope(resource_id) else {
            return Vec::new();
        };
        let mut keys: Vec<Key> = Vec::new();
        for include in includes {
            let Some((key, earlier, later)) =
                self.slot_of(include.id).and_then(|s| self.around(s, scope))
            else {
                continue;
            };
            keys.push(key);
            keys.extend(earlier.take(include.before));
            keys.extend(later.take(include.after));
        }
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter().map(|k| self.row(k.2)).collect()
    }

    /// For each id, the ids of the messages right before and right after it in its thread
    /// (`None` past either end), under the same rules as [`Timeline::window`]; an unknown id,
    /// or one outside `resource_id`, has neither.
    pub fn adjacent(
        &self,
        ids: &[&str],
        resource_id: Option<&str>,
    ) -> Vec<(Option<&str>, Option<&str>)> {
        let Some(scope) = self.scope(resource_id) else {
            return vec![(None, None); ids.len()];
        };
        let id_of = |k: Key| &*self.slot(k.2).id;
        ids.iter()
            .map(
                |id| match self.slot_of(id).and_then(|s| self.around(s, scope)) {
                    Some((_, mut earlier, mut later)) => {
                        (earlier.next().map(id_of), later.next().map(id_of))
                    }
                    None => (None, None),
                },
            )
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::tests::*;
    use proptest::prelude::*;

    fn window(
        t: &Timeline,
        includes: &[(&str, usize, usize)],
        resource: Option<&str>,
    ) -> Vec<String> {
        let includes: Vec<Include> = includes
            .iter()
            .map(|&(id, before, after)| Include { id, before, after })
            .collect();
        ids(&t.window(&includes, resource))
    }

    #[test]
    fn window_clips_merges_and_stays_in_the_thread() {
        let t = ten();
        assert_eq!(window(&t, &[("m1", 3, 1)], None), ["m0", "m1", "m2"]);
        assert_eq!(window(&t, &[("m8", 0, 5)], None), ["m8", "m9"]);
        assert_eq!(
            window(&t, &[("m6", 1, 1), ("m3", 1, 2), ("nope", 9, 9)], None),
            ["m2", "m3", "m4", "m5", "m6", "m7"]
        );
        assert_eq!(
            window(&t, &[("x0", 5, 5), ("m0", 0, 0)], None),
            ["m0", "x0"]
        );
        assert!(window(&t, &[], None).is_empty());
    }

    #[test]
    fn adjacent_names_each_messages_neighbours_in_its_thread() {
        let t = ten();
        assert_eq!(
            t.adjacent(&["m0", "m5", "m9", "x0", "nope"], None),
            [
                (None, Some("m1")),
                (Some("m4"), Some("m6")),
                (Some("m8"), None),
                (None, None),
                (None, None)
            ]
        );
        assert_eq!(
            t.adjacent(&["m5", "m4"], Some("odd")),
            [(Some("m3"), Some("m7")), (None, None)]
        );
        assert_eq!(t.adjacent(&["m5"], Some("nobody")), [(None, None)]);
    }

    #[test]
    fn window_with_resource_counts_only_that_resource() {
        let t = ten();
        assert_eq!(window(&t, &[("m5", 1, 1)], Some("odd")), ["m3", "m5", "m7"]);
        assert!(window(&t, &[("m4", 1, 1)], Some("odd")).is_empty());
        assert!(window(&t, &[("m4", 1, 1)], Some("nobody")).is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1500, rng_seed: proptest::test_runner::RngSeed::Fixed(0xc0de), ..ProptestConfig::default() })]

        #[test]
        fn window_is_sorted_deduplicated_clipped_and_in_thread(
            specs in arb_rows(),
            includes in prop::collection::vec((0usize..45, 0usize..4, 0usize..4), 0..5),
            resource in prop::option::of(0u8..2),
            removed in prop::collection::vec(0usize..40, 0..5),
        ) {
            let mut t = build(&specs);
            let removed_ids: Vec<String> = removed.iter().map(|i| format!("m{i}")).collect();
            t.remove(&removed_ids.iter().map(String::as_str).collect::<Vec<_>>());
            let alive = |i: usize| i < specs.len() && !removed.contains(&i);
            let in_resource = |i: usize| resource.is_none_or(|r| specs[i].resource == Some(r));

            let names: Vec<String> = includes.iter().map(|(i, _, _)| format!("m{i}")).collect();
            let request: Vec<Include> = includes.iter().zip(&names)
                .map(|(&(_, before, after), id)| Include { id, before, after }).collect();
            let got = t.window(&request, resource.map(|r| format!("r{r}")).as_deref());

            let mut expected: Vec<usize> = Vec::new();
            for &(target, before, after) in &includes {
                if !alive(target) || !in_resource(target) { continue; }
                let line: Vec<usize> = naive_line(&specs, specs[target].thread)
                    .into_iter().filter(|&i| alive(i) && in_resource(i)).collect();
                let at = line.iter().position(|&i| i == target).unwrap();
                expected.extend(&line[at.saturating_sub(before)..(at + after + 1).min(line.len())]);
            }
            expected.sort_by_key(|&i| (specs[i].created_at, i));
            expected.dedup();
            prop_assert_eq!(ids(&got), expected.iter().map(|i| format!("m{i}")).collect::<Vec<_>>());
        }
    }
}
