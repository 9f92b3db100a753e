//! One page of a thread: date bounds, cursors, filters, offset and limit.
//!
//! Paging rules:
//! - A page holds the thread's messages that pass the resource, date and metadata filters and
//!   lie strictly between the cursors; `total` counts all of them, and the page is
//!   `[offset, offset + limit)` of them in the requested direction.
//! - With `after_id` the walk starts next to that message going forward, with only `before_id`
//!   it starts next to that message going backward, so the page holds the messages nearest the
//!   cursor; `offset` skips that many of the nearest first. The page is then returned in the
//!   requested direction.
//! - A cursor must name a message of the queried thread.

use super::{Key, RowRef, Timeline};
use crate::error::{CoreError, Result};
use crate::filter::Filter;

/// One end of a date range, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub at: i64,
    pub exclusive: bool,
}

/// A page request over one thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct PageQuery<'a> {
    pub thread_id: &'a str,
    pub resource_id: Option<&'a str>,
    pub start: Option<Bound>,
    pub end: Option<Bound>,
    pub metadata: Option<&'a Filter>,
    pub descending: bool,
    pub offset: usize,
    /// `None` means every message.
    pub limit: Option<usize>,
    pub after_id: Option<&'a str>,
    pub before_id: Option<&'a str>,
}

impl Timeline {
    /// One page of a thread's messages (see the module doc) and the count of all that pass.
    pub fn page(&self, q: &PageQuery) -> Result<(Vec<RowRef<'_>>, usize)> {
        let Some(line) = self.line(q.thread_id) else {
            self.cursor_position(&[], q.thread_id, q.after_id.or(q.before_id))?;
            return Ok((Vec::new(), 0));
        };
        let mut lo = match q.start {
            Some(b) => line.partition_point(|k| k.0 < b.at || (b.exclusive && k.0 == b.at)),
            None => 0,
        };
        let mut hi = match q.end {
            Some(b) => line.partition_point(|k| k.0 < b.at || (!b.exclusive && k.0 == b.at)),
            None => line.len(),
        };
        if let Some(after) = self.cursor_position(line, q.thread_id, q.after_id)? {
            lo = lo.max(after + 1);
        }
        if let Some(before) = self.cursor_position(line, q.thread_id, q.before_id)? {
            hi = hi.min(before);
        }
        let range = if lo < hi { &line[lo..hi] } else { &[][..] };
        let forward = match (q.after_id, q.before_id) {
            (Some(_), _) => true,
            (None, Some(_)) => false,
            (None, None) => !q.descending,
        };
        let limit = q.limit.unwrap_or(usize::MAX);
        let resource = match q.resource_id {
            Some(name) => match self.names.lookup(name) {
                Some(id) => Some(id),
                None => return Ok((Vec::new(), 0)),
            },
            None => None,
        };
        let (mut page, total) = if resource.is_none() && q.metadata.is_none() {
            let skip = q.offset.min(range.len());
            let take = limit.min(range.len() - skip);
            let window = if forward {
                &range[skip..skip + take]
            } else {
                &range[range.len() - skip - take..range.len() - skip]
            };
            let mut page: Vec<RowRef> = window.iter().map(|k| self.row(k.2)).collect();
            if !forward {
                page.reverse();
            }
            (page, range.len())
        } else {
            let passes = |k: &&Key| {
                let slot = self.slot(k.2);
                resource.is_none_or(|r| slot.resource == Some(r))
                    && q.metadata.is_none_or(|f| f.matches(&slot.metadata))
            };
            let walk: Box<dyn Iterator<Item = &Key>> = if forward {
                Box::new(range.iter())
            } else {
                Box::new(range.iter().rev())
            };
            let mut page = Vec::new();
            let mut total = 0;
            for k in walk.filter(passes) {
                if total >= q.offset && total - q.offset < limit {
                    page.push(self.row(k.2));
                }
                total += 1;
            }
            (page, total)
        };
        if forward == q.descending {
            page.reverse();
        }
        Ok((page, total))
    }

    /// Position of the cursor message `id` in `line`, the thread `thread_id`'s timeline.
    fn cursor_position(
        &self,
        line: &[Key],
        thread_id: &str,
        id: Option<&str>,
    ) -> Result<Option<usize>> {
        let Some(id) = id else {
            return Ok(None);
        };
        let found = self.by_id.get(id).and_then(|&slot| {
            let key = self.slot(slot).key(slot);
            line.binary_search(&key).ok()
        });
        match found {
            Some(at) => Ok(Some(at)),
            None => Err(CoreError::InvalidArgument(format!(
                "no message with id {id} in thread {thread_id}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::Input;
    use crate::timeline::tests::*;
    use proptest::prelude::*;

    #[test]
    fn date_bounds_are_inclusive_unless_exclusive() {
        let t = ten();
        let bounded = |start: (i64, bool), end: (i64, bool)| {
            page(
                &t,
                PageQuery {
                    start: Some(Bound {
                        at: start.0,
                        exclusive: start.1,
                    }),
                    end: Some(Bound {
                        at: end.0,
                        exclusive: end.1,
                    }),
                    ..q("t1")
                },
            )
        };
        assert_eq!(bounded((30, false), (40, false)).0, ["m3", "m4", "m5"]);
        assert_eq!(bounded((30, true), (40, false)).0, ["m4", "m5"]);
        assert_eq!(bounded((30, false), (40, true)).0, ["m3"]);
        assert_eq!(bounded((31, false), (39, false)), (vec![], 0));
        assert_eq!(bounded((90, false), (0, false)), (vec![], 0));
    }

    #[test]
    fn offset_and_limit_slice_in_the_requested_direction() {
        let t = ten();
        let asc = PageQuery {
            offset: 2,
            limit: Some(3),
            ..q("t1")
        };
        assert_eq!(
            page(&t, asc),
            (vec!["m2".into(), "m3".into(), "m4".into()], 10)
        );
        let desc = PageQuery {
            descending: true,
            ..asc
        };
        assert_eq!(
            page(&t, desc),
            (vec!["m7".into(), "m6".into(), "m5".into()], 10)
        );
        let past_end = PageQuery { offset: 20, ..asc };
        assert_eq!(page(&t, past_end), (vec![], 10));
        let all = PageQuery {
            descending: true,
            ..q("t1")
        };
        assert_eq!(page(&t, all).0.len(), 10);
        let none = PageQuery {
            limit: Some(0),
            ..q("t1")
        };
        assert_eq!(page(&t, none), (vec![], 10));
    }

    #[test]
    fn resource_and_metadata_filters_count_before_paging() {
        let t = ten();
        let odd = PageQuery {
            resource_id: Some("odd"),
            limit: Some(2),
            offset: 1,
            ..q("t1")
        };
        assert_eq!(page(&t, odd), (vec!["m3".into(), "m5".into()], 5));
        let desc = PageQuery {
            descending: true,
            ..odd
        };
        assert_eq!(page(&t, desc), (vec!["m7".into(), "m5".into()], 5));
        let unknown = PageQuery {
            resource_id: Some("nobody"),
            ..q("t1")
        };
        assert_eq!(page(&t, unknown), (vec![], 0));
        let input = Input::Map(vec![("n".into(), Input::Int(0))]);
        let f = Filter::metadata(&input).unwrap().unwrap();
        let meta = PageQuery {
            metadata: Some(&f),
            ..q("t1")
        };
        assert_eq!(
            page(&t, meta),
            (vec!["m0".into(), "m3".into(), "m6".into(), "m9".into()], 4)
        );
        let both = PageQuery {
            metadata: Some(&f),
            resource_id: Some("even"),
            ..q("t1")
        };
        assert_eq!(page(&t, both), (vec!["m0".into(), "m6".into()], 2));
    }

    #[test]
    fn cursors_bring_the_nearest_messages() {
        let t = ten();
        let after = PageQuery {
            after_id: Some("m4"),
            limit: Some(3),
            ..q("t1")
        };
        assert_eq!(
            page(&t, after),
            (vec!["m5".into(), "m6".into(), "m7".into()], 5)
        );
        let before = PageQuery {
            before_id: Some("m5"),
            limit: Some(3),
            ..q("t1")
        };
        assert_eq!(
            page(&t, before),
            (vec!["m2".into(), "m3".into(), "m4".into()], 5)
        );
        let before_desc = PageQuery {
            descending: true,
            ..before
        };
        assert_eq!(page(&t, before_desc).0, ["m4", "m3", "m2"]);
        let skip = PageQuery {
            offset: 1,
            ..before
        };
        assert_eq!(page(&t, skip).0, ["m1", "m2", "m3"]);
        let between = PageQuery {
            after_id: Some("m1"),
            before_id: Some("m4"),
            ..q("t1")
        };
        assert_eq!(page(&t, between), (vec!["m2".into(), "m3".into()], 2));
        let odd = PageQuery {
            after_id: Some("m2"),
            resource_id: Some("odd"),
            limit: Some(2),
            ..q("t1")
        };
        assert_eq!(page(&t, odd), (vec!["m3".into(), "m5".into()], 4));
    }

    #[test]
    fn cursors_are_stable_while_messages_arrive() {
        let mut t = ten();
        let before = PageQuery {
            before_id: Some("m5"),
            limit: Some(2),
            ..q("t1")
        };
        let first = page(&t, before);
        t.upsert(vec![row("late", "t1", None, 1000, 200)]);
        assert_eq!(page(&t, before), first);
    }

    #[test]
    fn unknown_cursor_is_an_error() {
        let t = ten();
        for (thread, cursor) in [("t1", "nope"), ("t1", "x0"), ("empty", "m1")] {
            let query = PageQuery {
                after_id: Some(cursor),
                ..q(thread)
            };
            assert_eq!(
                t.page(&query).unwrap_err(),
                CoreError::InvalidArgument(format!(
                    "no message with id {cursor} in thread {thread}"
                ))
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1500, rng_seed: proptest::test_runner::RngSeed::Fixed(0xc0de), ..ProptestConfig::default() })]

        #[test]
        fn page_equals_naive_filter_sort_slice(
            specs in arb_rows(),
            thread in 0u8..3,
            resource in prop::option::of(0u8..2),
            start in prop::option::of((0i64..8, any::<bool>())),
            end in prop::option::of((0i64..8, any::<bool>())),
            n in prop::option::of(0i64..3),
            descending in any::<bool>(),
            offset in 0usize..6,
            limit in prop::option::of(0usize..6),
            cursor in prop::option::of((0usize..40, any::<bool>())),
        ) {
            let t = build(&specs);
            let line = naive_line(&specs, thread);
            let cursor = cursor.filter(|(c, _)| line.contains(c));
            let cursor_id = cursor.map(|(c, _)| format!("m{c}"));
            let filter = n.map(|n| Filter::metadata(&Input::Map(vec![("n".into(), Input::Int(n))])).unwrap().unwrap());
            let resource_name = resource.map(|r| format!("r{r}"));
            let thread_name = format!("t{thread}");
            let query = PageQuery {
                thread_id: &thread_name,
                resource_id: resource_name.as_deref(),
                start: start.map(|(at, exclusive)| Bound { at, exclusive }),
                end: end.map(|(at, exclusive)| Bound { at, exclusive }),
                metadata: filter.as_ref(),
                descending,
                offset,
                limit,
                after_id: cursor.filter(|c| c.1).and(cursor_id.as_deref()),
                before_id: cursor.filter(|c| !c.1).and(cursor_id.as_deref()),
            };
            let (rows, total) = t.page(&query).unwrap();

            let cursor_pos = cursor.map(|(c, after)| (line.iter().position(|&i| i == c).unwrap(), after));
            let mut passing: Vec<usize> = line.iter().enumerate().filter(|&(pos, &i)| {
                let s = &specs[i];
                resource.is_none_or(|r| s.resource == Some(r))
                    && n.is_none_or(|n| s.n == n)
                    && start.is_none_or(|(at, ex)| if ex { s.created_at > at } else { s.created_at >= at })
                    && end.is_none_or(|(at, ex)| if ex { s.created_at < at } else { s.created_at <= at })
                    && cursor_pos.is_none_or(|(c, after)| if after { pos > c } else { pos < c })
            }).map(|(_, &i)| i).collect();
            prop_assert_eq!(total, passing.len());
            let walk_backward = match cursor_pos { Some((_, after)) => !after, None => descending };
            if walk_backward { passing.reverse(); }
            let mut expected: Vec<String> = passing.iter().skip(offset).take(limit.unwrap_or(usize::MAX)).map(|i| format!("m{i}")).collect();
            if walk_backward != descending { expected.reverse(); }
            prop_assert_eq!(ids(&rows), expected);
        }
    }
}
