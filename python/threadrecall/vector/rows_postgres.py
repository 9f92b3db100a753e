"""The rows of ``HnswVectorStore`` in PostgreSQL, shared by any number of processes.

Three tables in the storage's schema: ``hnsw_indexes`` (one row per index: dimension, metric,
``origin`` — a fresh uuid each time an index is created — and ``generation``),
``hnsw_rows`` (id, vector as little-endian float32 bytes, metadata as JSON text) and
``hnsw_changes`` (the ids each generation wrote or deleted).

Rows are written in the caller's transaction, like the messages they belong to. The
generation is taken last, just before the commit (``PostgresStorage.before_commit``): the
``UPDATE`` that bumps it locks the index's row until the commit, so generations are handed
out in commit order, and a reader that sees ``generation = g`` sees every change at or below
``g`` — the change feed's technique. A process's index is caught up with one statement that
reads the generation and, in the same snapshot, each id changed since the index's own
generation with its row as it is now (no row: deleted). Before each search a process first
reads just the index's catalogue row (a primary-key lookup, one round trip): when its
generation is the one the process's index reflects, nothing changed and that lookup is the
whole cost of staying current; only when it moved is the delta read. A caller about to read
the database anyway can fold that lookup into its own statement instead (``Freshness``):
search the index as it is, then learn in the same round trip whether it was current.

``hnsw_changes`` is pruned as it grows: every ``PRUNE_EVERY`` generations the transaction that
takes the generation deletes the changes older than the last ``PRUNE_KEEP`` generations and
records that horizon in ``hnsw_indexes.pruned``, in the same commit. A process whose index
reflects a generation below the horizon can no longer learn what changed since, so it
rebuilds its index from the rows (read in the same snapshot as the horizon, it never
replays a partial delta).
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from ..errors import IndexCorruptError, IndexNotFoundError
from ..storage.postgres.schema import migrate, quoted_schema
from .index_files import CacheSlot
from .rows import Delta

__all__ = ["Freshness", "PostgresRows", "MIGRATIONS"]

# Rows read per batch while an index is rebuilt.
BATCH = 5_000
# The name of this store's notes in a transaction's scratch.
_PENDING = "hnsw.changed"
# Every PRUNE_EVERY generations, the changes older than the last PRUNE_KEEP generations are
# deleted (a process lagging further behind rebuilds its index from the rows instead).
PRUNE_EVERY = 1_000
PRUNE_KEEP = 10_000

MIGRATIONS = [
    """
    CREATE TABLE {s}.hnsw_indexes (
        name TEXT PRIMARY KEY,
        dimension INTEGER NOT NULL,
        metric TEXT NOT NULL,
        origin TEXT NOT NULL,
        generation BIGINT NOT NULL DEFAULT 0
    );
    CREATE TABLE {s}.hnsw_rows (
        index_name TEXT NOT NULL,
        id TEXT NOT NULL,
        vector BYTEA NOT NULL,
        metadata TEXT NOT NULL,
        PRIMARY KEY (index_name, id)
    );
    ALTER TABLE {s}.hnsw_rows ALTER COLUMN vector SET STORAGE EXTERNAL;
    CREATE TABLE {s}.hnsw_changes (
        index_name TEXT NOT NULL,
        generation BIGINT NOT NULL,
        id TEXT NOT NULL
    );
    CREATE INDEX hnsw_changes_at ON {s}.hnsw_changes (index_name, generation);
    """,
    # The horizon of hnsw_changes: the changes at or below it are deleted.
    """
    ALTER TABLE {s}.hnsw_indexes ADD COLUMN pruned BIGINT NOT NULL DEFAULT 0;
    """,
]

INFO = "SELECT dimension, metric, generation FROM {s}.hnsw_indexes WHERE name = %(name)s"
CREATE = """INSERT INTO {s}.hnsw_indexes (name, dimension, metric, origin)
            VALUES (%(name)s, %(dimension)s, %(metric)s, %(origin)s)
            ON CONFLICT (name) DO NOTHING RETURNING dimension"""
WRITE = """
    INSERT INTO {s}.hnsw_rows (index_name, id, vector, metadata)
    SELECT %(name)s, i.id,
           substring(%(vectors)b::bytea FROM ((i.n - 1) * %(width)s + 1)::int FOR %(width)s::int), i.metadata
    FROM unnest(%(ids)b::text[], %(texts)b::text[]) WITH ORDINALITY AS i(id, metadata, n)
    ON CONFLICT (index_name, id) DO UPDATE SET vector = excluded.vector, metadata = excluded.metadata
"""
DELETE = "DELETE FROM {s}.hnsw_rows WHERE index_name = %(name)s AND id = ANY(%(ids)b::text[])"
# The generation of a transaction's changes, taken last (its row lock is held to the commit).
STAMP = """
    WITH g AS (UPDATE {s}.hnsw_indexes SET generation = generation + 1 WHERE name = %(name)s
               RETURNING generation),
         noted AS (INSERT INTO {s}.hnsw_changes (index_name, generation, id)
                   SELECT %(name)s, g.generation, i.id FROM g, unnest(%(ids)b::text[]) AS i(id))
    SELECT generation FROM g
"""
# Delete the changes at or below a new horizon, and record it (in the stamping transaction,
# which already holds the index's row lock).
PRUNE = """
    WITH horizon AS (UPDATE {s}.hnsw_indexes SET pruned = %(horizon)s
                     WHERE name = %(name)s AND pruned < %(horizon)s RETURNING name)
    DELETE FROM {s}.hnsw_changes c USING horizon
    WHERE c.index_name = horizon.name AND c.generation <= %(horizon)s
"""
# The cheap check before a search: which creation of the index, its generation, its horizon.
HEAD = "SELECT origin, generation, pruned FROM {s}.hnsw_indexes WHERE name = %(name)s"
# The index's catalogue row joined with every id changed since a generation and its row now
# (``:since`` and ``:name`` name the parameters).
_CHANGED = """
    FROM {s}.hnsw_indexes x
    LEFT JOIN LATERAL (
        SELECT DISTINCT ch.id FROM {s}.hnsw_changes ch
        WHERE ch.index_name = x.name AND ch.generation > %(:since)s AND ch.generation <= x.generation
    ) c ON TRUE
    LEFT JOIN {s}.hnsw_rows r ON r.index_name = x.name AND r.id = c.id
    WHERE x.name = %(:name)s
"""
# The generation and, in the same snapshot, every id changed since ``since`` with its row now.
CHANGES = ("SELECT x.origin, x.generation, x.pruned, c.id, r.vector, r.metadata"
           + _CHANGED.replace(":since", "since").replace(":name", "name"))
# CHANGES shaped as rows of a message read, to run inside another statement: the id column
# NULL (no message), then the changed id (NULL: no change), origin, generation, horizon, and
# the row now as "<base64 vector> <metadata>" (NULL: deleted).
FRESHNESS = ("SELECT NULL::text, c.id, x.origin, x.generation, x.pruned,"
             " encode(r.vector, 'base64') || ' ' || r.metadata"
             + _CHANGED.replace(":since", "freshness_since").replace(":name", "freshness_index"))
SNAPSHOT_HEAD = ("SELECT origin, generation, (SELECT count(*) FROM {s}.hnsw_rows WHERE index_name = %(name)s) "
                 "FROM {s}.hnsw_indexes WHERE name = %(name)s")
SNAPSHOT_ROWS = "SELECT id, vector, metadata FROM {s}.hnsw_rows WHERE index_name = %(name)s"


class PostgresRows:
    """Vector rows in the schema of a ``PostgresStorage`` (see the module docstring)."""

    shared = True  # other processes write: the index catches up before each search

    def __init__(self, storage: Any, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.storage = storage
        self.key = id(storage)
        with storage.connection() as conn:
            migrate(conn, storage.schema, "hnsw", MIGRATIONS)
            ident = quoted_schema(storage.schema).as_string(conn)
        self._sql = {name: text.replace("{s}", ident) for name, text in (
            ("INFO", INFO), ("CREATE", CREATE), ("WRITE", WRITE), ("DELETE", DELETE),
            ("STAMP", STAMP), ("PRUNE", PRUNE), ("HEAD", HEAD), ("CHANGES", CHANGES),
            ("FRESHNESS", FRESHNESS), ("SNAPSHOT_HEAD", SNAPSHOT_HEAD),
            ("SNAPSHOT_ROWS", SNAPSHOT_ROWS))}
        self._ident = ident
        # Without a cache folder no index file is kept: each process builds its index from
        # the database.
        self._cache = None if cache_dir is None else CacheSlot(cache_dir, storage.schema)

    @property
    def in_transaction(self) -> bool:
        return self.storage.in_transaction

    def transaction(self) -> AbstractContextManager[Any]:
        return self.storage.transaction()

    def frozen(self) -> AbstractContextManager[Any]:
        return nullcontext()  # a rebuild reads one snapshot; later changes are caught up

    def on_commit(self, callback: Callable[[], None]) -> None:
        self.storage.on_commit(callback)

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection]:
        """The open transaction's connection, else a pooled one."""
        if self.storage.in_transaction:
            with self.storage.transaction() as conn:
                yield conn
        else:
            with self.storage.connection() as conn:
                yield conn

    def _one(self, query: str, params: dict[str, Any]) -> Any:
        with self._conn() as conn:
            return conn.execute(self._sql[query], params).fetchone()

    # ---- catalogue ----

    def info(self, name: str) -> tuple[int, str, int] | None:
        return self._one("INFO", {"name": name})

    def origin(self, name: str) -> str | None:
        head = self._one("HEAD", {"name": name})
        return None if head is None else head[0]

    def names(self) -> list[str]:
        with self._conn() as conn:
            rows = conn.execute(f"SELECT name FROM {self._ident}.hnsw_indexes ORDER BY name").fetchall()
        return [r[0] for r in rows]

    def count(self, name: str) -> int:
        with self._conn() as conn:
            ((count,),) = conn.execute(f"SELECT count(*) FROM {self._ident}.hnsw_rows WHERE index_name = %s",
                                       [name]).fetchall()
        return count

    def create(self, name: str, dimension: int, metric: str) -> int | None:
        """Create an index; the dimension of an existing one instead (nothing written)."""
        params = {"name": name, "dimension": dimension, "metric": metric, "origin": str(uuid.uuid4())}
        if self._one("CREATE", params) is not None:
            return None
        row = self.info(name)
        return None if row is None else row[0]

    def drop(self, name: str, then: Callable[[], None]) -> None:
        with self.storage.transaction() as conn:
            for table, column in (("hnsw_rows", "index_name"), ("hnsw_changes", "index_name"),
                                  ("hnsw_indexes", "name")):
                conn.execute(f"DELETE FROM {self._ident}.{table} WHERE {column} = %s", [name])
            self.storage.on_commit(then)

    # ---- rows ----

    def write(self, name: str, ids: list[str], matrix: np.ndarray, texts: list[str],
              replacing: bool) -> None:
        """Insert or replace rows in the open transaction (their generation comes at commit)."""
        data = np.ascontiguousarray(matrix, dtype="<f4")
        params = {"name": name, "ids": ids, "texts": texts, "vectors": data.tobytes(), "width": 4 * data.shape[1]}
        with self.storage.transaction() as conn:
            conn.cursor(binary=True).execute(self._sql["WRITE"], params)
            self._changed(name, ids)

    def delete(self, name: str, ids: list[str]) -> None:
        with self.storage.transaction() as conn:
            conn.execute(self._sql["DELETE"], {"name": name, "ids": ids})
            self._changed(name, ids)

    def _changed(self, name: str, ids: list[str]) -> None:
        """Note ids the open transaction changed; their generation is stamped before it commits."""
        scratch = self.storage.scratch
        pending = scratch.get(_PENDING)
        if pending is None:
            pending = scratch[_PENDING] = {}
            self.storage.before_commit(lambda conn: self._stamp(conn, pending))
        pending.setdefault(name, {}).update(dict.fromkeys(ids))

    def _stamp(self, conn: psycopg.Connection, pending: dict[str, dict[str, None]]) -> None:
        for name in sorted(pending):  # one order everywhere: no two transactions deadlock
            row = conn.execute(self._sql["STAMP"], {"name": name, "ids": list(pending[name])}).fetchone()
            if row is not None and row[0] % PRUNE_EVERY == 0 and row[0] > PRUNE_KEEP:
                conn.execute(self._sql["PRUNE"], {"name": name, "horizon": row[0] - PRUNE_KEEP})

    def fetch(self, name: str, ids: list[str], vectors: bool = False) -> list[tuple[Any, ...]]:
        columns = "id, metadata, vector" if vectors else "id, metadata"
        with self._conn() as conn:
            return conn.cursor(binary=True).execute(
                f"SELECT {columns} FROM {self._ident}.hnsw_rows "
                "WHERE index_name = %s AND id = ANY(%s::text[])", [name, ids]).fetchall()

    def texts(self, name: str) -> list[tuple[str, str]]:
        with self._conn() as conn:
            return conn.execute(
                f"SELECT id, metadata FROM {self._ident}.hnsw_rows WHERE index_name = %s",
                [name]).fetchall()

    def changes(self, name: str, since: int, dim: int, origin: str | None = None) -> Delta:
        """What changed after ``since`` in the committed state. First the index's catalogue
        row alone: when its generation is still ``since``, nothing changed (one cheap round
        trip); else the delta, in one statement. A rebuild from one snapshot when the index
        has no origin yet, and ``reset`` when it is not the one it was built from or its
        changes after ``since`` are pruned."""
        if origin is None:
            return self._snapshot(name, dim)
        with self.storage.connection() as conn:
            head = conn.execute(self._sql["HEAD"], {"name": name}).fetchone()
            if head is None:
                raise IndexNotFoundError(f"index {name} does not exist")
            if _outdated(head, since, origin) or head[1] == since:
                return _unchanged_or_reset(head, since, origin)
            rows = conn.cursor(binary=True).execute(
                self._sql["CHANGES"], {"name": name, "since": since}).fetchall()
        if not rows:
            raise IndexNotFoundError(f"index {name} does not exist")
        if _outdated(rows[0], since, origin):
            return _unchanged_or_reset(rows[0], since, origin)
        present = [r for r in rows if r[3] is not None and r[4] is not None]
        removed = [r[3] for r in rows if r[3] is not None and r[4] is None]
        batches = iter([_batch(present, dim, first=3)] if present else [])
        return Delta(rows[0][1], removed, len(present), batches, origin=origin)

    def freshness(self, name: str, since: int, origin: str, dim: int) -> Freshness:
        """The check, to run in another statement, that an index held at generation ``since``
        of creation ``origin`` reflects every committed change, bringing what changed."""
        params = {"freshness_index": name, "freshness_since": since}
        return Freshness(self._sql["FRESHNESS"], params, since, origin, dim)

    def _snapshot(self, name: str, dim: int) -> Delta:
        """Every row of ``name`` and the generation they reflect, read in one snapshot."""
        rows = self._snapshot_rows(name, dim)
        origin, generation, total = next(rows)
        return Delta(generation, [], total, rows, origin=origin)  # type: ignore[arg-type]

    def _snapshot_rows(self, name: str, dim: int) -> Iterator[Any]:
        with self.storage.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            head = conn.execute(self._sql["SNAPSHOT_HEAD"], {"name": name}).fetchone()
            if head is None:
                raise IndexNotFoundError(f"index {name} does not exist")
            yield head
            cur = conn.cursor(name="threadrecall_hnsw_rebuild", binary=True)
            cur.itersize = BATCH
            cur.execute(self._sql["SNAPSHOT_ROWS"], {"name": name})
            while chunk := cur.fetchmany(BATCH):
                yield _batch(chunk, dim, first=0)

    # ---- index files ----

    @property
    def in_memory(self) -> bool:
        return self._cache is None

    def index_path(self, name: str) -> Path | None:
        return None if self._cache is None else self._cache.path(name)

    def remove_leftovers(self) -> None:
        pass  # the cache's set, once held, is cleared of them (no other process writes it)

    def close(self) -> None:
        if self._cache is not None:
            self._cache.release()


@dataclass
class Freshness:
    """Whether an index searched as this process held it (at generation ``since`` of creation
    ``origin``) was current, read by whoever runs ``sql`` (``FRESHNESS``: rows shaped as
    message rows) in a statement of theirs and passes its rows to ``observe``. ``held``
    stays ``False`` until rows show the generation and creation unchanged, so a check never
    run counts as stale; when the generation moved, ``delta`` is what changed since (``None``
    when the index must be rebuilt instead).

    >>> check = Freshness("SELECT ...", {}, since=7, origin="o1", dim=1)
    >>> check.observe([(None, None, "o1", 7, 0, None)]); check.held, check.delta
    (True, None)
    >>> check.observe([(None, "a#0", "o1", 8, 0, "AACAPw== {}")]); check.held, check.delta.total
    (False, 1)
    """

    sql: str
    params: dict[str, Any]
    since: int
    origin: str
    dim: int
    held: bool = field(default=False, init=False)
    delta: Delta | None = field(default=None, init=False)

    def observe(self, rows: list[tuple[Any, ...]]) -> None:
        if not rows or _outdated(rows[0][2:5], self.since, self.origin):
            return
        generation = rows[0][3]
        self.held = generation == self.since
        if self.held:
            return
        removed = [r[1] for r in rows if r[1] is not None and r[5] is None]
        present = []
        for r in rows:
            if r[1] is not None and r[5] is not None:
                vector, _, metadata = r[5].partition(" ")
                present.append((r[1], base64.b64decode(vector), metadata))
        batches = iter([_batch(present, self.dim, first=0)] if present else [])
        self.delta = Delta(generation, removed, len(present), batches, origin=self.origin)


def _outdated(head: tuple[Any, ...], since: int, origin: str) -> bool:
    """Whether an index at generation ``since`` of creation ``origin`` cannot be caught up
    from ``head`` (origin, generation, pruned): the index was created again, or the changes
    after ``since`` are (partly) pruned."""
    now_origin, generation, pruned = head[0], head[1], head[2]
    return now_origin != origin or generation < since or since < pruned


def _unchanged_or_reset(head: tuple[Any, ...], since: int, origin: str) -> Delta:
    if _outdated(head, since, origin):
        return Delta(head[1], [], 0, iter(()), reset=True, origin=head[0])
    return Delta(since, [], 0, iter(()), origin=origin)


def _batch(rows: list[tuple[Any, ...]], dim: int, first: int) -> tuple[list[str], np.ndarray, list[str]]:
    """``(ids, vectors, metadata texts)`` of rows holding id, vector bytes and metadata from
    column ``first`` on."""
    ids = [r[first] for r in rows]
    blob = b"".join(bytes(r[first + 1]) for r in rows)
    if len(blob) != len(rows) * dim * 4:
        raise IndexCorruptError(f"a stored vector is not {dim} float32 values")
    vectors = np.frombuffer(blob, dtype="<f4").astype(np.float32).reshape(len(rows), dim)
    return ids, vectors, [r[first + 2] for r in rows]
