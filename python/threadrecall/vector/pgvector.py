"""A vector store inside PostgreSQL: pgvector HNSW indexes, searched by the database.

Each index is a table ``<schema>.pgvector_<n>`` (``n`` from the catalogue
``<schema>.pgvector_indexes``) of ``id``, ``embedding vector(dimension)`` and ``metadata
jsonb``, with an HNSW index on the embedding and btree indexes on ``metadata -> 'thread_id'``
and ``metadata -> 'resource_id'``, so that a search scoped to one thread or resource can run
as an exact scan of just that scope when it is small. A resource holds many threads' vectors,
spread over the whole heap, so the table also stores ``resource_key`` (the string
``resource_id``, ``COLLATE "C"``) with a btree on it that INCLUDEs ``id`` and the embedding
(when a vector fits a btree tuple: ``INCLUDE_MAX_DIMENSION``): a resource's search reads its
vectors contiguous in that index, without visiting the heap (an index-only scan). At 1M
vectors of 384 dimensions, 10,000 to a resource, that scan replaced one of 10,000 heap pages
(benches/pgvector_scope_scan.py); the index costs about the table's size again. A plain btree
on ``resource_key`` beside it (a few bytes a row) counts a resource's rows, which decides
between the exact scan and the graph, without reading its vectors; a resource counted small
is scanned exactly without a count for the next ``SMALL_SCOPE_SECONDS``.

Scores are those of ``HnswVectorStore`` (larger is closer): cosine similarity (vectors are
stored at unit length and compared by inner product, so a zero vector scores 0), dot product,
or minus the L2 distance. Filters are the core's Mongo-style filters, validated by the core and
compiled to SQL by ``sql_filter``. Searches run with pgvector's iterative index scan
(``hnsw.iterative_scan = relaxed_order``), so a filtered graph search keeps walking until it
has ``top_k`` matches instead of returning fewer; both settings are made once per pooled
connection, so a search outside a transaction is one statement and one round trip.

Given a ``PostgresStorage``, every write runs in its transaction (vectors commit with the
messages, or roll back with them) and reads inside a transaction see its writes.
"""

from __future__ import annotations

import functools
import json
import math
import time
import uuid
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg
from psycopg import errors, sql
from psycopg_pool import ConnectionPool

from ..errors import (
    DimensionMismatchError,
    IndexNotFoundError,
    InvalidArgumentError,
)
from ..storage.postgres.schema import migrate, quoted_schema
from ..types import IndexStats, QueryResult, check_name, dumps
from .arguments import METRICS
from .arguments import as_matrix as _as_matrix
from .arguments import check_name as _check_name
from .arguments import is_int as _is_int
from .base import AsyncTwins
from .sql_filter import TRUE, compile_filter, float_json, text_key

__all__ = ["PgVector"]

# pgvector indexes ``vector`` columns of at most this many dimensions with HNSW; wider
# indexes are searched exactly.
HNSW_MAX_DIMENSION = 2000
# The HNSW candidate list of a search when none is given: pgvector's default (40) gives
# recall@10 below 0.95 on 100k-vector indexes of text embeddings.
EF_SEARCH = 100
_TWO_POW_53 = 2.0**53
# A filtered search passing fewer rows than this scans them exactly (through the btree
# indexes on thread_id / resource_id, or the table); more, and it walks the HNSW graph.
# At 100k x 384 an exact scan of 1,000 rows takes a few ms where the iterative graph walk
# to a 1% scope takes tens; at 1M x 384 the exact scan of a 10,000-row scope took 89 ms at
# recall@10 1.000 against 164-279 ms at 0.90 for the graph walk (benches/results/pg_vectors.md).
EXACT_SCOPE = 20_000
# A resource counted below EXACT_SCOPE is scanned exactly without being counted again for this
# many seconds: at 1M x 384 the count took about 1 ms of an 8- to 10-ms search. A resource
# that grew past EXACT_SCOPE meanwhile is still scanned exactly: the same answer, more slowly.
SMALL_SCOPE_SECONDS = 30.0
_now = time.monotonic
# The ``_shape`` of a filter that is one resource by string equality (semantic recall's
# resource scope): its rows are counted on ``resource_key``'s plain btree, and their vectors
# read after, once. At 1M that measured 0.93 of the time of counting them as they are read, as
# other scopes do, whose rows come from the heap anyway (benches/results/pg_vectors_notes.md).
_ONE_RESOURCE = (("resource_id", str),)
# The widest vectors the resource index includes: a btree tuple holds at most 2704 bytes, and
# an included vector of d dimensions takes 4 d + 8, leaving room for the id and resource_id
# (``_KEY_BYTES`` together). Wider indexes keep a plain btree on ``resource_key``.
INCLUDE_MAX_DIMENSION = 512
_TUPLE_BYTES = 2704 - 32  # BTMaxItemSize on 8 kB pages, less the tuple's headers and padding
# The stored text column of each key a search scope names by string equality.
TEXT_COLUMNS = {"resource_id": "resource_key"}

_RESOURCE_KEY = text_key("resource_id").as_string(None)

MIGRATIONS = [
    """
    CREATE TABLE {s}.pgvector_indexes (
        name TEXT PRIMARY KEY,
        dimension INTEGER NOT NULL,
        metric TEXT NOT NULL,
        n SERIAL UNIQUE
    );
    """,
    # Every existing index table gets resource_key and its btree (rewrites each table once).
    """
    DO $$
    DECLARE r record;
    BEGIN
        FOR r IN SELECT n, dimension FROM {s}.pgvector_indexes LOOP
            EXECUTE format('ALTER TABLE {s}.%I ADD COLUMN resource_key TEXT COLLATE "C" '
                           'GENERATED ALWAYS AS (""" + _RESOURCE_KEY.replace("'", "''") + """) STORED',
                           'pgvector_' || r.n);
            EXECUTE format('CREATE INDEX ON {s}.%I (resource_key)'
                           || CASE WHEN r.dimension <= """ + str(INCLUDE_MAX_DIMENSION) + """
                                   THEN ' INCLUDE (id, embedding)' ELSE '' END,
                           'pgvector_' || r.n);
        END LOOP;
    END $$;
    """,
    # A resource's scope is counted on a plain btree, not on the one that includes its vectors.
    """
    DO $$
    DECLARE r record;
    BEGIN
        FOR r IN SELECT n FROM {s}.pgvector_indexes WHERE dimension <= """ + str(INCLUDE_MAX_DIMENSION) + """ LOOP
            EXECUTE format('CREATE INDEX ON {s}.%I (resource_key)', 'pgvector_' || r.n);
        END LOOP;
    END $$;
    """,
]

# Per metric: the HNSW operator class of the stored form, and the distance operator whose
# negation is the score (cosine: vectors at unit length, so minus the inner product).
_OPCLASS = {"cosine": "vector_ip_ops", "dotproduct": "vector_ip_ops", "euclidean": "vector_l2_ops"}
_OPS = {"cosine": "<#>", "dotproduct": "<#>", "euclidean": "<->"}

# One statement each: a transaction in pipeline mode takes no multi-statement string.
_SETTINGS = (sql.SQL("SET {scope} hnsw.ef_search = {ef}"), sql.SQL("SET {scope} hnsw.iterative_scan = relaxed_order"))
# The hnsw.ef_search each pooled connection searches with (its session setting).
_SEARCH_SETTINGS: weakref.WeakKeyDictionary[psycopg.Connection, int] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class _Index:
    table: sql.Composed
    dimension: int
    metric: str
    # Search statements as sent, by the shape of their filter (``_shape``): composed once.
    statements: dict[Any, bytes] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # Resources counted small lately, with when that count expires (``_now``).
    small: dict[str, float] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def plan(self, filter: Any, shape: Any) -> str:
        """How a search with ``filter`` (of ``_shape`` ``shape``) runs: ``"counted"`` (one
        resource, counted on its btree first), ``"small"`` (such a resource counted small
        lately: scanned exactly) or ``"scoped"`` (any other)."""
        if shape != _ONE_RESOURCE:
            return "scoped"
        return "small" if self.small.get(filter["resource_id"], 0.0) > _now() else "counted"

    def counted(self, resource: str, size: int) -> None:
        """Remember a resource's count from a ``"counted"`` search."""
        if size < EXACT_SCOPE:
            if len(self.small) >= 65_536:
                self.small.clear()
            self.small[resource] = _now() + SMALL_SCOPE_SECONDS


class PgVector(AsyncTwins):
    """Named vector indexes in PostgreSQL, searched by pgvector's HNSW.

    >>> store = PgVector(dsn, schema="docs_pgvector")  # doctest: +SKIP
    >>> store.create_index("docs", 3)  # doctest: +SKIP
    >>> store.upsert("docs", [[1, 0, 0], [0, 1, 0]], ids=["a", "b"],
    ...              metadata=[{"thread_id": "t1"}, {"thread_id": "t2"}])  # doctest: +SKIP
    ['a', 'b']
    >>> [r.id for r in store.query("docs", [1, 0, 0], filter={"thread_id": "t2"})]  # doctest: +SKIP
    ['b']

    Args:
        storage_or_dsn: a ``PostgresStorage`` (its pool, schema and transactions are shared)
            or a connection string.
        schema: the schema of the vector tables; ``None`` is the storage's schema, or
            ``"threadrecall"`` with a connection string.
        m: HNSW links per vector of new indexes.
        ef_construction: the candidate list while building new indexes.
        ef_search: the candidate list while searching (at least ``top_k`` is used).
    """

    def __init__(self, storage_or_dsn: Any, *, schema: str | None = None, m: int = 16,
                 ef_construction: int = 64, ef_search: int = EF_SEARCH) -> None:
        for label, value in (("m", m), ("ef_construction", ef_construction), ("ef_search", ef_search)):
            if not _is_int(value) or value < 1:
                raise InvalidArgumentError(f"{label} must be a positive integer, got {value!r}")
        if not 2 <= m <= 100:
            raise InvalidArgumentError(f"m must be between 2 and 100 (pgvector's limits), got {m}")
        if ef_construction < 2 * m or ef_construction > 1000:
            raise InvalidArgumentError(
                f"ef_construction must be between 2 * m and 1000 (pgvector's limits), got {ef_construction}")
        self.m, self.ef_construction, self.ef_search = m, ef_construction, min(ef_search, 1000)
        if isinstance(storage_or_dsn, str):
            self.storage = None
            self.schema = schema or "threadrecall"
            quoted_schema(self.schema)
            self._pool: ConnectionPool | None = ConnectionPool(
                storage_or_dsn, min_size=1, max_size=10, kwargs={"autocommit": True},
                open=True, name=f"threadrecall.pgvector.{self.schema}")
        elif hasattr(storage_or_dsn, "transaction") and hasattr(storage_or_dsn, "schema"):
            self.storage = storage_or_dsn
            self.schema = schema or storage_or_dsn.schema
            quoted_schema(self.schema)
            self._pool = None
        else:
            raise InvalidArgumentError("storage_or_dsn must be a PostgresStorage or a connection string")
        self._ident = quoted_schema(self.schema)
        self._indexes: dict[str, _Index] = {}
        with self._own_transaction() as conn:
            # One extension per database, created once even when processes start together.
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('threadrecall.pgvector', 0))")
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            migrate(conn, self.schema, "pgvector", MIGRATIONS)

    def close(self) -> None:
        """Close the connection pool this store opened (a storage's pool stays open)."""
        if self._pool is not None:
            self._pool.close()

    def __enter__(self) -> PgVector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- connections ----

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        """A connection in a transaction: the storage's (joined when one is open) or our own."""
        if self.storage is not None:
            with self.storage.transaction() as conn:
                yield conn
        else:
            assert self._pool is not None
            with self._pool.connection() as conn, conn.transaction():
                yield conn

    @contextmanager
    def _pooled(self) -> Iterator[psycopg.Connection]:
        """A pooled connection in autocommit mode, outside any transaction: ours, or the
        storage's."""
        if self._pool is not None:
            with self._pool.connection() as conn:
                yield conn
        elif hasattr(self.storage, "connection"):
            with self.storage.connection() as conn:  # type: ignore[union-attr]
                yield conn
        else:
            with self.storage._pool.connection() as conn:  # type: ignore[union-attr]
                yield conn

    @contextmanager
    def _own_transaction(self) -> Iterator[psycopg.Connection]:
        """A transaction of its own, committed at its end even inside a caller's transaction."""
        with self._pooled() as conn, conn.transaction():
            yield conn

    def _after_commit(self, callback: Any) -> None:
        if self.storage is not None:
            self.storage.on_commit(callback)
        else:
            callback()

    # ---- indexes ----

    def create_index(self, name: str, dimension: int, metric: str = "cosine") -> None:
        """Create an index; the same dimension again is a no-op.

        Args:
            name: 1-63 letters, digits, ``_`` or ``-``.
            dimension: the length of its vectors.
            metric: ``"cosine"``, ``"euclidean"`` or ``"dotproduct"``.

        Raises DimensionMismatchError when ``name`` exists with another dimension. The index
        is created at once, on a connection of its own: an index is a container, and creating
        it again is a no-op, so it is kept even when a caller's transaction rolls back.
        """
        _check_name(name)
        if not _is_int(dimension) or dimension < 1:
            raise InvalidArgumentError(f"dimension must be a positive integer, got {dimension!r}")
        if dimension > 16000:
            raise InvalidArgumentError(f"dimension must be at most 16000 (pgvector's limit), got {dimension}")
        if metric not in METRICS:
            raise InvalidArgumentError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
        with self._own_transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                         [f"threadrecall.pgvector:{self.schema}:{name}"])
            row = conn.execute(sql.SQL("SELECT dimension FROM {}.pgvector_indexes WHERE name = %s")
                               .format(self._ident), [name]).fetchone()
            if row is not None:
                if row[0] != dimension:
                    raise DimensionMismatchError(
                        f"index {name} exists with dimension {row[0]}, not {dimension}")
                return
            (n,) = _one(conn.execute(sql.SQL(
                "INSERT INTO {}.pgvector_indexes (name, dimension, metric) VALUES (%s, %s, %s) "
                "RETURNING n").format(self._ident), [name, dimension, metric]))
            table = sql.Identifier(f"pgvector_{n}")
            params = {"s": self._ident, "t": table, "dim": sql.Literal(dimension)}
            conn.execute(sql.SQL(
                "CREATE TABLE {s}.{t} (id TEXT PRIMARY KEY, embedding vector({dim}) NOT NULL, "
                "metadata JSONB NOT NULL, resource_key TEXT COLLATE \"C\" GENERATED ALWAYS AS ({key}) STORED)"
            ).format(key=text_key("resource_id"), **params))
            for key in ("thread_id", "resource_id"):
                conn.execute(sql.SQL("CREATE INDEX ON {s}.{t} ((metadata -> {k}))").format(
                    k=sql.Literal(key), **params))
            conn.execute(sql.SQL("CREATE INDEX ON {s}.{t} (resource_key)").format(**params))
            if dimension <= INCLUDE_MAX_DIMENSION:
                conn.execute(sql.SQL("CREATE INDEX ON {s}.{t} (resource_key) INCLUDE (id, embedding)")
                             .format(**params))
            if dimension <= HNSW_MAX_DIMENSION:
                conn.execute(sql.SQL(
                    "CREATE INDEX ON {s}.{t} USING hnsw (embedding {ops}) "
                    "WITH (m = {m}, ef_construction = {ef})").format(
                        ops=sql.SQL(_OPCLASS[metric]), m=sql.Literal(self.m),
                        ef=sql.Literal(self.ef_construction), **params))

    def describe_index(self, name: str) -> IndexStats:
        """Dimension, metric and vector count of an index."""
        index = self._info(name)
        with self._reading(name) as conn:
            (count,) = _one(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(index.table)))
        return IndexStats(dimension=index.dimension, metric=index.metric, count=count)

    def list_indexes(self) -> list[str]:
        """Names of every index, sorted."""
        with self._connection() as conn:
            rows = conn.execute(sql.SQL("SELECT name FROM {}.pgvector_indexes ORDER BY name")
                                .format(self._ident)).fetchall()
        return [r[0] for r in rows]

    def delete_index(self, name: str) -> None:
        """Delete an index and all its vectors (``IndexNotFoundError`` when it does not exist)."""
        index = self._info(name)
        with self._connection() as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(index.table))
            conn.execute(sql.SQL("DELETE FROM {}.pgvector_indexes WHERE name = %s")
                         .format(self._ident), [name])
            self._indexes.pop(name, None)
        self._after_commit(functools.partial(self._indexes.pop, name, None))

    def _info(self, name: str) -> _Index:
        _check_name(name)
        index = self._indexes.get(name)
        if index is not None:
            return index
        in_transaction = self.storage is not None and self.storage.in_transaction
        with self._connection() as conn:
            row = conn.execute(sql.SQL(
                "SELECT dimension, metric, n FROM {}.pgvector_indexes WHERE name = %s")
                .format(self._ident), [name]).fetchone()
        if row is None:
            raise IndexNotFoundError(f"index {name} does not exist")
        index = _Index(sql.SQL("{}.{}").format(self._ident, sql.Identifier(f"pgvector_{row[2]}")),
                       row[0], row[1])
        if not in_transaction:  # an index created by an open transaction may yet roll back
            self._indexes[name] = index
        return index

    @contextmanager
    def _reading(self, name: str) -> Iterator[psycopg.Connection]:
        """A transaction on the table of ``name``; a table dropped by another process since
        it was looked up raises ``IndexNotFoundError``."""
        try:
            with self._connection() as conn:
                yield conn
        except errors.UndefinedTable:
            self._indexes.pop(name, None)
            raise IndexNotFoundError(f"index {name} does not exist") from None

    # ---- vectors ----

    def upsert(self, name: str, vectors: Any, *, ids: Sequence[str] | None = None,
               metadata: Sequence[dict[str, Any]] | None = None) -> list[str]:
        """Insert or replace vectors by id; returns the ids (uuid4 strings when none given).

        Args:
            name: the index.
            vectors: a ``(n, dimension)`` array or a list of ``n`` vectors.
            ids: one non-empty string per vector; a repeated id keeps its last vector.
            metadata: one JSON dict per vector, what ``filter`` reads (JSONB holds finite
                numbers only, and no NUL character).
        """
        index = self._info(name)
        matrix = _as_matrix(vectors, index.dimension)
        n = len(matrix)
        ids = [str(uuid.uuid4()) for _ in range(n)] if ids is None else list(ids)
        metadata = [{} for _ in range(n)] if metadata is None else list(metadata)
        if len(ids) != n or len(metadata) != n:
            raise InvalidArgumentError(f"{n} vectors but {len(ids)} ids and {len(metadata)} metadata entries")
        if any(not isinstance(i, str) or not i.strip() for i in ids):
            raise InvalidArgumentError("vector ids must be non-empty strings")
        for i in ids:
            check_name(i, "a vector id")
        if any(not isinstance(m, dict) for m in metadata):
            raise InvalidArgumentError("each metadata entry must be a dict")
        texts = [_metadata_json(m) for m in metadata]
        if index.dimension <= INCLUDE_MAX_DIMENSION:
            _check_tuple_room(index.dimension, ids, metadata)
        if n == 0:
            return []
        last = {i: k for k, i in enumerate(ids)}  # a repeated id keeps its last vector
        keep = sorted(last.values())
        rows = matrix[keep]
        if index.metric == "cosine":
            rows = _unit(rows)
        statement = sql.SQL(
            "INSERT INTO {} (id, embedding, metadata) VALUES (%s, %s::vector, %s::jsonb) "
            "ON CONFLICT (id) DO UPDATE SET embedding = excluded.embedding, metadata = excluded.metadata"
        ).format(index.table)
        with self._reading(name) as conn, conn.cursor() as cur:  # pipelined: one round trip
            cur.executemany(statement, [(ids[k], _vector_text(r), texts[k]) for k, r in zip(keep, rows)])
        return ids

    def query(self, name: str, vector: Any, *, top_k: int = 10, filter: dict[str, Any] | None = None,
              include_vector: bool = False) -> list[QueryResult]:
        """The ``top_k`` closest vectors passing ``filter``, closest first.

        ``score`` is larger when closer: cosine similarity, dot product, or minus the L2
        distance. ``metadata`` is the stored metadata dict; with ``include_vector`` the stored
        vector comes too (at unit length for cosine).

        Args:
            name: the index.
            vector: the query vector.
            top_k: how many results at most.
            filter: a Mongo-style filter over the stored metadata (``$eq``, ``$in``, ``$and``...).
            include_vector: also return each result's stored vector.
        """
        extra = ", metadata::text" + (", embedding::text" if include_vector else "")
        rows = self._search(name, vector, top_k, filter, extra)
        return [QueryResult(id=r[0], score=float(r[1]), metadata=json.loads(r[2]),
                            vector=np.array(json.loads(r[3]), dtype=np.float32) if include_vector else None)
                for r in rows]

    def search_ids(self, name: str, vector: Any, *, top_k: int = 10,
                   filter: dict[str, Any] | None = None) -> list[tuple[str, float]]:
        """``query`` without the metadata: ``(id, score)`` pairs, closest first (the fast path
        of semantic recall)."""
        return [(r[0], float(r[1])) for r in self._search(name, vector, top_k, filter, "")]

    def search_sql(self, name: str, vector: Any, *, top_k: int = 10,
                   filter: dict[str, Any] | None = None) -> tuple[str, list[Any]]:
        """The one SQL statement a search runs, with its parameters (for ``EXPLAIN``)."""
        index = self._info(name)
        with self._reading(name) as conn:
            statement, params = self._statement(index, vector, top_k, filter, "")
            return statement.as_string(conn), params

    def _statement(self, index: _Index, vector: Any, top_k: int, filter: Any,
                   extra: str) -> tuple[sql.Composed, list[Any]]:
        plan = index.plan(filter, _shape(filter))
        condition, params = self._bound(index, vector, top_k, filter, plan)
        return self._compose(index, condition, extra, plan), params

    @staticmethod
    def _bound(index: _Index, vector: Any, top_k: int, filter: Any,
               plan: str) -> tuple[sql.Composable, list[Any]]:
        """The filter's condition and the search's parameters: the query vector, the filter's
        values and ``top_k`` (twice each for a filtered search that may walk the graph)."""
        if not _is_int(top_k) or top_k < 1:
            raise InvalidArgumentError(f"top_k must be a positive integer, got {top_k!r}")
        query = _as_matrix(vector, index.dimension, single=True)
        if index.metric == "cosine":
            query = _unit(query)
        condition, params = compile_filter(filter if filter != {} else None, text_columns=TEXT_COLUMNS)
        text = _vector_text(query[0])
        if condition is TRUE:
            return condition, [text, top_k]
        if plan == "small":
            return condition, [text, *params, top_k]
        if plan == "counted":
            return condition, [*params, text, *params, top_k, text, *params, top_k]
        return condition, [text, *params, top_k, text, *params, top_k]

    @staticmethod
    def _compose(index: _Index, condition: sql.Composable, extra: str, plan: str = "scoped") -> sql.Composed:
        parts = {"op": sql.SQL(_OPS[index.metric]), "extra": sql.SQL(extra), "t": index.table,
                 "cond": condition, "n": sql.Literal(EXACT_SCOPE)}
        if condition is TRUE:  # ORDER BY the selected distance: the index's order, sent once
            return sql.SQL("SELECT id, embedding {op} %s::vector AS distance{extra} FROM {t} "
                           "ORDER BY distance LIMIT %s").format(**parts)
        # OFFSET 0 keeps an exact scan's ORDER BY from being served by the HNSW index.
        if plan == "small":  # a resource counted small lately: its vectors read, not counted
            return sql.SQL("SELECT * FROM (SELECT id, embedding {op} %s::vector AS distance{extra} FROM {t} "
                           "WHERE {cond} OFFSET 0) exact ORDER BY distance LIMIT %s").format(**parts)
        if plan == "counted":  # counted on resource_key's plain btree, its vectors read once after;
            # each row also carries the count, for the next searches of the resource
            return sql.SQL(
                "WITH size AS MATERIALIZED (SELECT count(*) AS n FROM (SELECT FROM {t} WHERE {cond} LIMIT {n}) s) "
                "(SELECT *, (SELECT n FROM size) FROM (SELECT id, embedding {op} %s::vector AS distance{extra} "
                "FROM {t} WHERE {cond} AND (SELECT n FROM size) < {n} OFFSET 0) exact ORDER BY distance LIMIT %s) "
                "UNION ALL "
                "(SELECT id, embedding {op} %s::vector AS distance{extra}, (SELECT n FROM size) FROM {t} "
                "WHERE {cond} AND (SELECT n FROM size) >= {n} ORDER BY distance LIMIT %s)"
            ).format(**parts)
        # A filtered search: an exact scan of the rows passing the filter when fewer than
        # EXACT_SCOPE do (found through the scope indexes), else the iterative HNSW scan. The
        # scope's rows are read once, with their distances; their count gates each branch as
        # a one-time filter, so the graph is walked only for a large scope.
        statement = sql.SQL(
            "WITH scope AS MATERIALIZED (SELECT id, embedding {op} %s::vector AS distance{extra} "
            "FROM {t} WHERE {cond} LIMIT {n}) "
            "(SELECT * FROM scope WHERE (SELECT count(*) FROM scope) < {n} ORDER BY distance LIMIT %s) "
            "UNION ALL "
            "(SELECT id, embedding {op} %s::vector AS distance{extra} FROM {t} "
            "WHERE {cond} AND (SELECT count(*) FROM scope) >= {n} ORDER BY distance LIMIT %s)"
        ).format(**parts)
        return statement

    def _search(self, name: str, vector: Any, top_k: int, filter: Any, extra: str) -> list[tuple]:
        """Run a search in one round trip. The HNSW settings are session settings of a pooled
        connection, set the first time it searches (they change nothing but HNSW scans); in
        the storage's open transaction they are ``SET LOCAL`` and last until it ends. The
        statement of a usual filter (a few keys equal to scalars) is composed once and sent
        as the same text each time, so the connection prepares it after a few runs."""
        index = self._info(name)
        shape = _shape(filter)
        plan = index.plan(filter, shape)
        condition, params = self._bound(index, vector, top_k, filter, plan)
        key = (extra, shape, plan)
        statement: Any = index.statements.get(key)
        ef = max(self.ef_search, min(top_k, 1000))
        with self._read(name) as conn:
            if statement is None:
                statement = self._compose(index, condition, extra, plan).as_bytes(conn)
                if shape is not None and len(index.statements) < 256:
                    index.statements[key] = statement
            if self.storage is not None and self.storage.in_transaction:
                for setting in _SETTINGS:
                    conn.execute(setting.format(scope=sql.SQL("LOCAL"), ef=sql.Literal(ef)))
            elif _SEARCH_SETTINGS.get(conn) != ef:
                for setting in _SETTINGS:
                    conn.execute(setting.format(scope=sql.SQL("SESSION"), ef=sql.Literal(ef)))
                _SEARCH_SETTINGS[conn] = ef
            rows = conn.execute(statement, params).fetchall()
        if plan == "counted" and rows:
            index.counted(filter["resource_id"], rows[0][-1])
            rows = [r[:-1] for r in rows]
        # relaxed_order may return near neighbours slightly out of order
        rows.sort(key=lambda r: r[1])
        return [(r[0], -r[1], *r[2:]) for r in rows]

    @contextmanager
    def _read(self, name: str) -> Iterator[psycopg.Connection]:
        """A connection for one read: the open transaction's, else a pooled one in autocommit."""
        if self.storage is not None and self.storage.in_transaction:
            with self._reading(name) as conn:
                yield conn
            return
        try:
            with self._pooled() as conn:
                yield conn
        except errors.UndefinedTable:
            self._indexes.pop(name, None)
            raise IndexNotFoundError(f"index {name} does not exist") from None

    def delete_vectors(self, name: str, *, ids: Sequence[str] | None = None,
                       filter: dict[str, Any] | None = None) -> None:
        """Delete vectors by id, by filter, or both (the union).

        Args:
            name: the index.
            ids: the ids to delete (unknown ids are ignored).
            filter: delete every vector whose metadata passes this filter.
        """
        index = self._info(name)
        if ids is None and filter is None:
            raise InvalidArgumentError("delete_vectors needs ids or a filter")
        terms: list[sql.Composable] = []
        params: list[Any] = []
        if ids is not None:
            ids = [ids] if isinstance(ids, str) else list(ids)
            if any(not isinstance(i, str) for i in ids):
                raise InvalidArgumentError("vector ids must be strings")
            ids = [i for i in ids if "\x00" not in i]  # no stored id holds NUL
            terms.append(sql.SQL("id = ANY(%s::text[])"))
            params.append(ids)
        if filter is not None:
            condition, filter_params = compile_filter(filter)
            terms.append(condition)
            params.extend(filter_params)
        with self._reading(name) as conn:
            conn.execute(sql.SQL("DELETE FROM {} WHERE {}").format(
                index.table, sql.SQL(" OR ").join(terms)), params)


def _shape(filter: Any) -> Any:
    """What the SQL of ``filter`` depends on (its values aside), as a dict key: two filters of
    one shape compile to the same condition, with different parameters. ``None`` for a filter
    too unusual to be worth remembering."""
    if filter is None or filter == {}:
        return ()
    if not isinstance(filter, dict) or len(filter) > 8:
        return None
    shape: list[tuple[str, type]] = []
    for key, value in filter.items():
        if not isinstance(key, str) or key.startswith("$") or "\x00" in key or not key.isascii():
            return None
        if isinstance(value, bool):
            shape.append((key, bool))
        elif isinstance(value, (str, int, float)) and not (isinstance(value, str) and "\x00" in value):
            shape.append((key, type(value)))
        else:
            return None  # operators, lists, null: composed each time
    return tuple(shape)


def _check_tuple_room(dimension: int, ids: list[str], metadata: list[dict[str, Any]]) -> None:
    """Refuse a vector whose id and resource_id leave its resource index tuple too large."""
    room = _TUPLE_BYTES - (4 * dimension + 8)
    for i, m in zip(ids, metadata):
        resource = m.get("resource_id")
        used = len(i.encode()) + (len(resource.encode("utf-8", "replace")) if isinstance(resource, str) else 0)
        if used > room:
            raise InvalidArgumentError(
                f"vector {i[:40]!r}: its id and resource_id take {used} bytes, more than the {room} "
                f"an index of {dimension} dimensions has room for")


def _one(cursor: psycopg.Cursor) -> tuple[Any, ...]:
    row = cursor.fetchone()
    assert row is not None
    return row


def _metadata_json(metadata: dict[str, Any]) -> str:
    """The JSONB text of one metadata dict: top-level floats in ``float_json``'s encoding, so
    filters compare them exactly as the core does; refuses what JSONB cannot hold."""
    text = dumps(metadata)
    if "\\u0000" in text:
        raise InvalidArgumentError("vector metadata cannot hold the NUL character (PostgreSQL text cannot)")
    if "NaN" in text or "Infinity" in text:
        _check_finite(metadata, [])
    if any(isinstance(v, float) and abs(v) >= _TWO_POW_53 for v in metadata.values()):
        parts = [json.dumps(k, ensure_ascii=False) + ":" +
                 (float_json(v) if isinstance(v, float) and abs(v) >= _TWO_POW_53 else dumps(v))
                 for k, v in metadata.items()]
        text = "{" + ",".join(parts) + "}"
    return text


def _check_finite(value: Any, path: list[Any]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        where = "".join(f"[{p!r}]" for p in path)
        raise InvalidArgumentError(
            f"vector metadata{where} is {value}, which PostgreSQL's JSONB cannot hold")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, [*path, k])
    elif isinstance(value, (list, tuple)):
        for k, v in enumerate(value):
            _check_finite(v, [*path, k])


def _vector_text(row: np.ndarray) -> str:
    """pgvector's text form of one float32 vector (each value round-trips exactly)."""
    return str(row.tolist())


def _unit(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; a zero row stays zero (as the core's cosine stores it)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
