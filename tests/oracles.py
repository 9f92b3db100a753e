"""Plain-Python models written for clarity only: the oracles the fast paths are tested against."""

from __future__ import annotations


def metadata_matches(stored: dict, wanted: dict) -> bool:
    """The recall metadata rule: exact types, numbers across int/float, None only for stored None."""
    for key, want in wanted.items():
        if key not in stored:
            return False
        have = stored[key]
        if want is None or isinstance(want, (bool, str)):
            if type(have) is not type(want) or have != want:
                return False
        elif isinstance(have, bool) or not isinstance(have, (int, float)) or have != want:
            return False
    return True


class OracleTimeline:
    def __init__(self):
        self.rows = {}  # id -> (id, thread, resource, created, seq, payload), metadata

    def upsert(self, ids, threads, resources, created, seqs, metadata, payloads):
        for row in zip(ids, threads, resources, created, seqs, metadata, payloads):
            self.rows[row[0]] = (row[:5] + (row[6],), row[5])

    def remove(self, ids):
        return sum(self.rows.pop(i, None) is not None for i in ids)

    def thread(self, thread_id, resource_id=None):
        rows = [(r, m) for r, m in self.rows.values()
                if r[1] == thread_id and (resource_id is None or r[2] == resource_id)]
        return sorted(rows, key=lambda rm: (rm[0][3], rm[0][4]))

    def page(self, thread_id, *, resource_id=None, start=None, start_exclusive=False, end=None,
             end_exclusive=False, metadata=None, descending=False, offset=0, limit=None):
        rows = [r for r, m in self.thread(thread_id, resource_id)
                if (start is None or (r[3] > start if start_exclusive else r[3] >= start))
                and (end is None or (r[3] < end if end_exclusive else r[3] <= end))
                and (not metadata or metadata_matches(m, metadata))]
        if descending:
            rows.reverse()
        stop = None if limit is None else offset + limit
        return rows[offset:stop], len(rows)

    def window(self, includes, resource_id=None):
        out = {}
        for mid, before, after in includes:
            if mid not in self.rows:
                continue
            target = self.rows[mid][0]
            if resource_id is not None and target[2] != resource_id:
                continue
            line = [r for r, _ in self.thread(target[1], resource_id)]
            at = [r[0] for r in line].index(mid)
            for r in line[max(0, at - before): at + after + 1]:
                out[r[0]] = r
        return sorted(out.values(), key=lambda r: (r[3], r[4]))
