"""The SQL statements of ``PostgresStorage``, as templates over the schema name ``{s}``.

Values always travel as parameters. Writes outside a transaction are single statements (one
round trip, one implicit transaction), each ending with ``LOG``: the change-feed entry,
written in the same statement. Inside ``transaction()`` the same statements run without it
and the entries are written once, by ``FLUSH_CHANGES``, just before the commit.
"""

from __future__ import annotations

__all__ = [
    "CHANGES_SINCE", "CREATE_THREADS", "DELETE_MESSAGES", "DELETE_THREAD", "FLUSH_CHANGES",
    "FOLD_COUNTS", "GET_MESSAGES", "GET_RESOURCE", "GET_THREADS", "LOCK", "PRUNE_CHANGES",
    "SAVE_MESSAGES", "SAVE_RESOURCE", "SAVE_THREADS", "SAVE_TURN", "SCAN_MESSAGES",
    "THREAD_FOR_UPDATE", "THREAD_MESSAGES", "WINDOW", "OWNED_WINDOW",
    "list_threads", "page",
]

# A message as recall's ``MessageRow``: (id, thread_id, resource_id, created_at, seq, payload),
# the payload JSON assembled here from the stored JSON columns, so rows need no decoding step.
MESSAGE_COLUMNS = ("m.id, m.thread_id, m.resource_id, m.created_at, m.seq, "
                   "'{\"role\":' || to_json(m.role)::text || ',\"type\":' || to_json(m.type)::text"
                   " || ',\"content\":' || m.content || ',\"metadata\":' || m.metadata || '}'")
# A page's rows carry the JSON columns as stored: the client assembles the payload
# (``rows.payload``), cheaper there than concatenated by the server.
PAGE_COLUMNS = "m.id, m.thread_id, m.resource_id, m.created_at, m.seq, m.role, m.type, m.content, m.metadata"
THREAD_COLUMNS = "id, resource_id, title, metadata, created_at, updated_at"

# The feed entries of a write, under the writing transaction's id (no shared row is touched:
# concurrent writers never wait for each other here).
_XID = "pg_current_xact_id()::text::bigint"
_LOG = """,
    log AS (INSERT INTO {{s}}.changes (position, kind, ref) SELECT """ + _XID + """, '{kind}', {ref} FROM {rows})
"""


# Locks: every write takes its thread rows first, then its message rows, each in id order
# (and, by their triggers, count rows no other writer takes), so that writers of
# overlapping messages wait for each other instead of deadlocking. A scalar subquery over the
# locked threads gates the message work: it runs once, before any message row is read. A
# delete touches the threads it locked: a message moved to another thread between the
# delete's snapshot and its lock leaves that thread's updated_at as the move set it.
#
# Messages as they arrive (one JSON array of rows, in order; the JSON columns as strings, so
# their exact text is kept), and their insert: ``fresh`` (defined by each statement) draws
# their seq in arrival order, and the insert takes them in id order. An existing message
# keeps its created_at and seq (the upsert does not set them; the seq drawn for it is left
# unused): the statement never looks the incoming ids up itself, so no plan of it can scan
# the table for them.
_INCOMING = """
    WITH incoming AS (
        SELECT r->>0 AS id, r->>1 AS thread_id, r->>2 AS resource_id, r->>3 AS role, r->>4 AS type,
               r->>5 AS content, r->>6 AS metadata, (r->>7)::jsonb AS filter,
               (r->>8)::bigint AS created_at, ord
        FROM jsonb_array_elements((SELECT %(rows)s::jsonb)) WITH ORDINALITY AS i(r, ord)
    ),"""
_INSERT = """
    ins AS (
        INSERT INTO {s}.messages AS m
            (id, thread_id, resource_id, role, type, content, metadata, filter, created_at, seq)
        SELECT id, thread_id, resource_id, role, type, content, metadata, filter, created_at, seq
        FROM fresh ORDER BY id
        ON CONFLICT (id) DO UPDATE SET thread_id = excluded.thread_id,
            resource_id = excluded.resource_id, role = excluded.role, type = excluded.type,
            content = excluded.content, metadata = excluded.metadata, filter = excluded.filter
        RETURNING m.id, m.created_at, m.seq
    )"""


def _logged(head: str, tail: str, *, rows: str, kind: str, ref: str) -> tuple[str, str]:
    """The statement without and with its feed entry."""
    log = _LOG.format(rows=rows, kind=kind, ref=ref)
    return head + "\n" + tail, head + log + tail


SAVE_MESSAGES = _logged(
    _INCOMING + """
    owners AS (SELECT id FROM {s}.threads WHERE id = ANY((SELECT %(touched)s::text[])::text[])
               ORDER BY id FOR UPDATE),
    fresh AS MATERIALIZED (
        SELECT a.*, nextval({seq}) AS seq
        FROM (SELECT * FROM incoming WHERE (SELECT count(*) FROM owners) >= 0 ORDER BY ord) a
    ),
""" + _INSERT + """,
    touch AS (UPDATE {s}.threads SET updated_at = %(now)s WHERE id IN (SELECT id FROM owners))""",
    "SELECT id, created_at, seq FROM ins",
    rows="ins", kind="u", ref="ins.id",
)

# A turn: messages with their threads in one statement. Each thread is upserted (created with
# the resource of its first message, else only its updated_at set), messages without a resource
# take their thread's; a missing thread whose first message names no resource writes nothing
# and comes back as an 'x' row. Rows: ('m', id, created_at µs, seq) per message, ('t', thread
# columns) per thread.
SAVE_TURN = _logged(
    _INCOMING + """
    wanted AS (SELECT DISTINCT ON (thread_id) thread_id AS id, resource_id FROM incoming
               ORDER BY thread_id, ord),
    missing AS (SELECT w.id FROM wanted w WHERE w.resource_id IS NULL
                AND NOT EXISTS (SELECT 1 FROM {s}.threads t WHERE t.id = w.id)),
    owners AS (
        INSERT INTO {s}.threads AS t (id, resource_id, created_at, updated_at)
        SELECT id, coalesce(resource_id, ''), %(now)s, %(now)s FROM wanted
        WHERE NOT EXISTS (SELECT 1 FROM missing)
        ORDER BY id
        ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at
        RETURNING t.id, t.resource_id, t.title, t.metadata, t.created_at, t.updated_at
    ),
    fresh AS MATERIALIZED (
        SELECT a.*, nextval({seq}) AS seq
        FROM (SELECT i.id, i.thread_id, coalesce(i.resource_id, o.resource_id) AS resource_id,
                     i.role, i.type, i.content, i.metadata, i.filter, i.created_at
              FROM incoming i JOIN owners o ON o.id = i.thread_id
              ORDER BY i.ord) a
    ),
""" + _INSERT,
    """
    SELECT 'm', id, NULL::text, NULL::text, NULL::text, NULL::timestamptz, NULL::timestamptz, created_at, seq
    FROM ins
    UNION ALL
    SELECT 't', id, resource_id, title, metadata, created_at, updated_at, NULL::bigint, NULL::bigint FROM owners
    UNION ALL
    SELECT 'x', id, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM missing""",
    rows="ins", kind="u", ref="ins.id",
)

DELETE_MESSAGES = _logged(
    """
    WITH owners AS (SELECT id FROM {s}.threads WHERE id IN (
                   SELECT thread_id FROM {s}.messages WHERE id = ANY((SELECT %(ids)s::text[])::text[]))
               ORDER BY id FOR UPDATE),
    doomed AS (SELECT id FROM {s}.messages WHERE id = ANY((SELECT %(ids)s::text[])::text[])
               AND (SELECT count(*) FROM owners) >= 0 ORDER BY id FOR UPDATE),
    gone AS (DELETE FROM {s}.messages WHERE id IN (SELECT id FROM doomed) RETURNING id, thread_id),
    touch AS (UPDATE {s}.threads SET updated_at = %(now)s
              WHERE id IN (SELECT thread_id FROM gone) AND id IN (SELECT id FROM owners))""",
    "SELECT id FROM gone",
    rows="gone", kind="d", ref="gone.id",
)

DELETE_THREAD = _logged(
    """
    WITH owner AS (SELECT id FROM {s}.threads WHERE id = %(thread)s FOR UPDATE),
    doomed AS (SELECT id FROM {s}.messages WHERE thread_id = %(thread)s
               AND (SELECT count(*) FROM owner) >= 0 ORDER BY id FOR UPDATE),
    gone AS (DELETE FROM {s}.messages WHERE id IN (SELECT id FROM doomed) RETURNING id),
    dropped AS (DELETE FROM {s}.threads WHERE id = %(thread)s RETURNING id),
    one AS (SELECT 1 FROM gone LIMIT 1)""",
    "SELECT (SELECT count(*) FROM gone)",
    rows="one", kind="t", ref="%(thread)s",
)

FLUSH_CHANGES = """
    INSERT INTO {s}.changes (position, kind, ref)
    SELECT """ + _XID + """, c.kind, c.ref
    FROM unnest((SELECT %(kinds)s::text[]), (SELECT %(refs)s::text[])) AS c(kind, ref)
"""

# What the transactions at or above a watermark wrote, leaving out those the reader already
# has (``known``), in one snapshot: an 'h' row (the snapshot's watermark, and 1 when the feed
# does not reach back to the position: pruned, or the position is not of this feed), an 'a'
# row per transaction at or above the new watermark that committed (the reader has them after
# this call), 't' per deleted thread, 'd' per deleted id still gone, and 'u' per changed
# message as it is now, including those of deleted threads (a thread written again after its
# deletion).
_WATERMARK = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
CHANGES_SINCE = """
    WITH head AS MATERIALIZED (SELECT """ + _WATERMARK + """ AS position),
    ch AS MATERIALIZED (SELECT c.kind, c.ref FROM {s}.changes c
           WHERE c.position >= %(position)s AND c.position <> ALL(%(known)s::bigint[])),
    refs AS MATERIALIZED (SELECT ref, bool_or(kind = 'd') AS deleted FROM ch WHERE kind <> 't' GROUP BY ref),
    threads AS MATERIALIZED (SELECT DISTINCT ref FROM ch WHERE kind = 't')
    SELECT 'h', NULL::text, NULL::text, NULL::text, head.position,
           (%(position)s > head.position OR %(position)s < (SELECT position FROM {s}.feed_horizon)
            OR (%(position)s <> 0 AND %(position)s < (SELECT position FROM {s}.feed)))::int::bigint,
           NULL::text
    FROM head
    UNION ALL
    SELECT DISTINCT 'a', NULL, NULL, NULL, c.position, NULL::bigint, NULL
    FROM {s}.changes c WHERE c.position >= (SELECT position FROM head)
    UNION ALL
    SELECT 't', ref, NULL, NULL, NULL, NULL, NULL FROM threads
    UNION ALL
    SELECT 'd', ref, NULL, NULL, NULL, NULL, NULL FROM refs r
    WHERE r.deleted AND NOT EXISTS (SELECT 1 FROM {s}.messages m WHERE m.id = r.ref)
    UNION ALL
    SELECT 'u', """ + MESSAGE_COLUMNS + """ FROM {s}.messages m WHERE m.id IN (SELECT ref FROM refs)
    UNION ALL
    SELECT 'u', """ + MESSAGE_COLUMNS + """ FROM {s}.messages m
    WHERE m.thread_id IN (SELECT ref FROM threads) AND NOT EXISTS (SELECT 1 FROM refs WHERE refs.ref = m.id)
"""

# Fold the count rows of the server's processes into each key's slot 0, leaving those a writer
# holds for a later fold (the only locks a fold waits for are other folds' slot-0 rows, taken
# in key order).
FOLD_COUNTS = """
    WITH unfolded AS (SELECT thread_id, resource_id, slot FROM {s}.thread_counts WHERE slot <> 0
                      FOR UPDATE SKIP LOCKED),
    folded AS (DELETE FROM {s}.thread_counts c USING unfolded u
               WHERE c.thread_id = u.thread_id AND c.resource_id = u.resource_id AND c.slot = u.slot
               RETURNING c.thread_id, c.resource_id, c.n)
    INSERT INTO {s}.thread_counts AS c (thread_id, resource_id, slot, n)
    SELECT thread_id, resource_id, 0, sum(n) FROM folded GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (thread_id, resource_id, slot) DO UPDATE SET n = c.n + excluded.n
"""

# Drop the entries more than ``keep`` positions below the watermark, moving the horizon up to
# them in the same transaction (readers see both or neither).
PRUNE_CHANGES = """
    WITH horizon AS (
        UPDATE {s}.feed_horizon SET position = greatest(position, """ + _WATERMARK + """ - %(keep)s)
        RETURNING position)
    DELETE FROM {s}.changes WHERE position < (SELECT position FROM horizon)
"""

GET_MESSAGES = f"SELECT {MESSAGE_COLUMNS} FROM {{s}}.messages m WHERE m.id = ANY(%(ids)s::text[])"
THREAD_MESSAGES = (f"SELECT {MESSAGE_COLUMNS} FROM {{s}}.messages m WHERE m.thread_id = %(thread)s "
                   "ORDER BY m.created_at, m.seq")
SCAN_MESSAGES = f"SELECT {MESSAGE_COLUMNS} FROM {{s}}.messages m ORDER BY m.seq"

# Values the planner would look into (array lengths, a filter's selectivity) are read through
# ``(SELECT %(x)s)``: custom and generic plans then cost alike, so a prepared statement keeps
# its generic plan instead of being planned again on every call (planning cost more than
# running these).

# The targets with their widest asked-for context, then each one's neighbours on both sides
# (full rows, read by the thread's index), de-duplicated in the thread's order.
_STORED = "id, thread_id, resource_id, role, type, content, metadata, created_at, seq"
WINDOW = """
    WITH inc AS (SELECT id, max(nb) AS nb, max(na) AS na
                 FROM unnest((SELECT %(ids)s::text[]), (SELECT %(before)s::bigint[]),
                             (SELECT %(after)s::bigint[])) AS i(id, nb, na)
                 GROUP BY id),
    t AS MATERIALIZED (
        SELECT """ + ", ".join("m." + c for c in _STORED.split(", ")) + """, i.nb, i.na
        FROM inc i JOIN {s}.messages m ON m.id = i.id {target_scope}
    ),
    picked AS (
        SELECT """ + _STORED + """ FROM t
        UNION ALL
        SELECT e.* FROM t CROSS JOIN LATERAL (
            SELECT """ + _STORED + """ FROM {s}.messages x
            WHERE x.thread_id = t.thread_id AND (x.created_at, x.seq) < (t.created_at, t.seq) {scope}
            ORDER BY x.created_at DESC, x.seq DESC LIMIT t.nb) e
        UNION ALL
        SELECT l.* FROM t CROSS JOIN LATERAL (
            SELECT """ + _STORED + """ FROM {s}.messages x
            WHERE x.thread_id = t.thread_id AND (x.created_at, x.seq) > (t.created_at, t.seq) {scope}
            ORDER BY x.created_at, x.seq LIMIT t.na) l
    )
    SELECT DISTINCT ON (m.created_at, m.seq, m.id) """ + MESSAGE_COLUMNS + """ FROM picked m
    ORDER BY m.created_at, m.seq, m.id
"""


# The window, and the resource of one thread as an extra row with no message id (no such row:
# no such thread): recall checks the thread's owner with the read, in one round trip.
OWNED_WINDOW = ("(" + WINDOW + """) UNION ALL
    (SELECT NULL, id, resource_id, NULL::bigint, NULL::bigint, NULL FROM {s}.threads WHERE id = %(thread)s)
""")

def page(*, resource: bool, start: str | None, end: str | None, metadata: bool, after: bool,
         before: bool, forward: bool, owner: bool = False, stored_total: bool = False) -> str:
    """One page of a thread with the count of every message passing the same conditions, and
    whether each cursor names a message of the thread, in one statement (``Timeline.page``'s
    rules: ``start``/``end`` are the comparison operators of the date bounds).

    Every row has the nine ``PAGE_COLUMNS``: the page's rows, and first a counts' row with no
    message id, whose third column is the resource of the thread (with ``owner``; ``NULL``:
    no such thread, or no ``owner``), fourth the count, fifth the cursors that name a message
    of the thread (1: ``after``, 2: ``before``, either counted as found when not asked for).
    ``stored_total`` (only without bounds, filter and cursors, and with no resource or a
    non-empty one) reads the total from ``thread_counts`` instead of counting the rows."""
    cond = ["m.thread_id = (SELECT %(thread)s::text)"]
    if resource:
        cond.append("m.resource_id = (SELECT %(resource)s::text)")
    if start:
        cond.append(f"m.created_at {start} (SELECT %(start)s::bigint)")
    if end:
        cond.append(f"m.created_at {end} (SELECT %(end)s::bigint)")
    if metadata:
        cond.append("m.filter @> (SELECT %(filter)s::jsonb)")
    ctes = []
    if after:
        ctes.append("a AS MATERIALIZED (SELECT created_at, seq FROM {s}.messages "
                    "WHERE id = %(after)s AND thread_id = %(thread)s)")
        cond.append("(m.created_at, m.seq) > (SELECT created_at, seq FROM a)")
    if before:
        ctes.append("b AS MATERIALIZED (SELECT created_at, seq FROM {s}.messages "
                    "WHERE id = %(before)s AND thread_id = %(thread)s)")
        cond.append("(m.created_at, m.seq) < (SELECT created_at, seq FROM b)")
    where = " AND ".join(cond)
    direction = "" if forward else " DESC"
    has_a = "(EXISTS (SELECT 1 FROM a))::int" if after else "1"
    has_b = "2 * (EXISTS (SELECT 1 FROM b))::int" if before else "2"
    owned = "(SELECT resource_id FROM {s}.threads WHERE id = (SELECT %(thread)s::text))" if owner else "NULL::text"
    order = f"ORDER BY m.created_at{direction}, m.seq{direction}"
    window = "OFFSET (SELECT %(offset)s::bigint) LIMIT (SELECT %(limit)s::bigint)"
    counted = f"(SELECT count(*) FROM {{s}}.messages m WHERE {where})"
    if stored_total:
        # No bound, filter or cursor: the total is the thread's kept count (``thread_counts``),
        # the sum of its rows for the resource, or for all.
        scoped = " AND c.resource_id = (SELECT %(resource)s::text)" if resource else ""
        counted = ("(SELECT coalesce(sum(c.n), 0)::bigint FROM {s}.thread_counts c "
                   "WHERE c.thread_id = (SELECT %(thread)s::text)" + scoped + ")")
    if metadata:
        # The filter reads every row of the thread from the heap: the page's rows come with
        # the count of all that pass (one pass, where a separate count would read them again);
        # only a page past the last of them counts on its own.
        ctes.append(f"p AS MATERIALIZED (SELECT count(*) OVER () AS n, {PAGE_COLUMNS} "
                    f"FROM {{s}}.messages m WHERE {where} {order} {window})")
        total = f"coalesce((SELECT n FROM p LIMIT 1), {counted})"
        rows = f"SELECT {PAGE_COLUMNS} FROM p m {order}"
    else:
        total = counted
        rows = f"SELECT {PAGE_COLUMNS} FROM {{s}}.messages m WHERE {where} {order} {window}"
    with_ = "WITH " + ", ".join(ctes) if ctes else ""
    return f"""
    {with_}
    (SELECT NULL::text, NULL::text, {owned}, {total}, ({has_a} + {has_b})::bigint,
            NULL::text, NULL::text, NULL::text, NULL::text)
    UNION ALL
    ({rows})
    """


GET_THREADS = f"SELECT {THREAD_COLUMNS} FROM {{s}}.threads WHERE id = ANY(%(ids)s::text[])"
THREAD_FOR_UPDATE = f"SELECT {THREAD_COLUMNS} FROM {{s}}.threads WHERE id = %(id)s FOR UPDATE"

_INCOMING_THREADS = """
    INSERT INTO {s}.threads (id, resource_id, title, metadata, filter, created_at, updated_at)
    SELECT * FROM unnest(%(ids)s::text[], %(resources)s::text[], %(titles)s::text[],
                         %(metadatas)s::text[], %(filters)s::jsonb[], %(created)s::timestamptz[],
                         %(updated)s::timestamptz[])
"""
SAVE_THREADS = _INCOMING_THREADS + f"""
    ON CONFLICT (id) DO UPDATE SET resource_id = excluded.resource_id, title = excluded.title,
        metadata = excluded.metadata, filter = excluded.filter, updated_at = excluded.updated_at
    RETURNING {THREAD_COLUMNS}
"""
CREATE_THREADS = _INCOMING_THREADS + " ON CONFLICT (id) DO NOTHING RETURNING id"


def list_threads(*, resource: bool, metadata: bool, field: str, direction: str) -> str:
    """A page of threads and the count of all that pass, in one statement (``field`` and
    ``direction`` are checked against fixed lists by the caller)."""
    cond = ["TRUE"]
    if resource:
        cond.append("resource_id = %(resource)s")
    if metadata:
        cond.append("filter @> %(filter)s::jsonb")
    where = " AND ".join(cond)
    return f"""
    SELECT c.total, r.*
    FROM (SELECT count(*) AS total FROM {{s}}.threads WHERE {where}) c
    LEFT JOIN LATERAL (
        SELECT {THREAD_COLUMNS} FROM {{s}}.threads WHERE {where}
        ORDER BY {field} {direction}, id {direction} LIMIT %(limit)s OFFSET %(offset)s
    ) r ON TRUE
    """


GET_RESOURCE = ("SELECT id, working_memory, metadata, created_at, updated_at "
                "FROM {s}.resources WHERE id = %(id)s")
SAVE_RESOURCE = """
    INSERT INTO {s}.resources (id, working_memory, metadata, created_at, updated_at)
    VALUES (%(id)s, %(working_memory)s, %(metadata)s, %(created)s, %(updated)s)
    ON CONFLICT (id) DO UPDATE SET working_memory = excluded.working_memory,
        metadata = excluded.metadata, updated_at = excluded.updated_at
"""

LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))"
