"""The default vector store: vectors in the database, searched through the Rust HNSW index.

The database holds the truth — every vector (little-endian float32 bytes), its metadata, and a
generation per index that orders the writes — through one of two row backends
(``rows_duckdb``, ``rows_postgres``; the interface is ``rows.Rows``). The HNSW graph is a cache
of it, kept in memory.

The graph holds int8 codes of the vectors in memory and walks them; the float vectors, which
re-rank what a walk found so that scores are exact, stay on disk and are read row by row
(through the page cache) as a search needs them.

Over DuckDB (one process per file) the graph follows this process's commits, and is saved
beside the database as ``<db path>.<index name>.hnsw``, its float vectors as
``<db path>.<index name>.vectors``, tagged with the generation it reflects and the index's
origin (a random id given when the index was created in this database). A save appends what
changed since the last one to both files. On first use an index file is loaded if its
generation matches (opening reads no float vector), caught up if it lags (rows written and
ids deleted after its generation are replayed), and rebuilt if it is missing, unreadable, or
of another origin: a file copied from another database, or left by an earlier index of the
same name, is never trusted; nor is a vectors file that is not the one the index file was
saved with, is shorter, or whose rows fail their checksums. A save cut short leaves a last
part that fails its checksum: the file is then trusted as of the save before.
Over an in-memory database, and over PostgreSQL without a cache folder, the float vectors go
to an unlinked temporary file instead (it has no name on disk and goes away with the process).
Over PostgreSQL (any number of processes) each process builds its graph from the rows in the
database on first use (the rows are searchable once read; a background thread links them), and
before each search brings it up to date with one query: the index's generation and what
changed since the graph's (see ``rows_postgres``). The database is the only copy that counts;
with ``cache_dir`` each process also keeps index files in a local folder, a set of its own
(``index_files``), so that a restart loads them and catches up instead of rebuilding.
Writes land in the database inside the caller's transaction and reach the graph only after it
commits, so a rolled-back outer transaction leaves the index untouched.

A committed vector is searchable at once but joins the graph later: a background daemon thread
links waiting vectors a small chunk at a time (each chunk holds the index's write lock only
briefly), and sleeps while there is nothing to link. Searches stay exact for vectors still
waiting. ``link()`` links everything now; the index file saves the waiting queue as it is.
        """

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import uuid
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import _core
from ..errors import (
    ConfigurationError,
    DimensionMismatchError,
    IndexCorruptError,
    IndexNotFoundError,
    InvalidArgumentError,
    StorageError,
)
from ..types import IndexStats, QueryResult, check_json, check_name, check_texts, dumps
from .arguments import METRICS
from .arguments import as_matrix as _as_matrix
from .arguments import check_name as _check_name
from .arguments import is_int as _is_int
from .backing import database_of, private, rows_for
from .base import AsyncTwins
from .linker import Linker, default_threads, weakly
from .loaded import Loaded, add_stored

__all__ = ["HnswVectorStore"]

log = logging.getLogger(__name__)

# Save the index file once this many vectors changed since the last save, or a quarter of the
# index when that is more. A save appends what changed, but an index file rewritten after a
# compaction costs the whole index: saving in proportion keeps that cost proportional to the
# changes. The background linker saves when it is idle, so writers never wait for a save; a
# reopen replays from the database whatever the file lacks.
SAVE_AFTER_CHANGES = 20_000
SAVE_AFTER_FRACTION = 0.25
# A backlog of at least this many waiting vectors is linked at once, on every core: by the
# call that brought it (a bulk upsert, a catch-up, a rebuild), or over a shared database, where
# it was read rather than written, in the background while searches scan it exactly. Fewer
# are left to the background linker.
BULK_LINK_FROM = 1_000
# A ``top_k`` beyond any index size, passed as such to the core (which clamps it to the size).
_LARGEST_K = 1 << 62


# The open store of each database, by id(Database) (a store holds its database, so the id stays
# unique while the entry lives; a store nobody holds any more drops out).
_STORES: weakref.WeakValueDictionary[int, HnswVectorStore] = weakref.WeakValueDictionary()
_STORES_LOCK = threading.Lock()


class HnswVectorStore(AsyncTwins):
    """Named vector indexes in DuckDB or PostgreSQL, searched through an in-memory HNSW graph.

    >>> store = HnswVectorStore()
    >>> store.create_index("docs", 3)
    >>> ids = store.upsert("docs", [[1, 0, 0], [0, 1, 0]], ids=["a", "b"],
    ...                    metadata=[{"thread_id": "t1"}, {"thread_id": "t2"}])
    >>> [r.id for r in store.query("docs", [1, 0.1, 0], top_k=1)]
    ['a']
    >>> [r.id for r in store.query("docs", [1, 0, 0], filter={"thread_id": "t2"})]
    ['b']
    >>> store.link("docs")  # link the waiting vectors into the graph now
    >>> store.close()

    With ``background_linking`` (the default) a bulk write is linked into the graph on
    ``threads`` threads before it returns, and a daemon thread links the few vectors of small
    writes while the store is open; without it they all wait for ``link()`` (searches are exact
    either way).

    Args:
        storage: a ``DuckDBStorage``, a ``Database``, a database path, or ``None`` for an
            in-memory database (the vectors live there, the index files beside it); or a
            ``PostgresStorage`` (the vectors live in its schema, shared by every process, and
            each process's graph is a cache of them).
        m: graph links per vector (more: better recall, more memory).
        ef_construction: the candidate list while linking (more: a better graph, slower writes).
        ef_search: the candidate list while searching; ``None`` lets the planner choose.
        background_linking: link new vectors in a daemon thread.
        threads: threads that link a bulk write (``BULK_LINK_FROM`` vectors or more waiting)
            before it returns; ``None``: ``THREADRECALL_THREADS``, else every available core.
        cache_dir: over PostgreSQL, a local folder where the process keeps its index files
            (one set per process at a time, see ``index_files``), so that a restarted
            process loads its graph and catches up instead of building it from the rows.
            ``None``: no index file, the database is the only copy. Over DuckDB the files
            always lie beside the database.
        hold_vectors: keep every float vector in memory as well as in its file, so a search's
            re-rank reads no file: faster queries (most for small filtered ones), for memory
            the size of the float vectors. ``False`` keeps them in memory only while an
            index's take at most 16 MiB.
    """

    # Set by ``__new__``: one store per database, shared by every open of it.
    _opens: int
    _handles: list[Any]
    _db: Any
    _settings: tuple[Any, ...]

    def __new__(cls, storage: Any = None, **settings: Any) -> HnswVectorStore:
        db, handle = database_of(storage)
        with _STORES_LOCK:
            store = None if private(db, handle) else _STORES.get(id(db))
            if store is None:
                store = super().__new__(cls)
                store._opens = 0
                store._handles = []
                store._db = db
                if not private(db, handle):
                    _STORES[id(db)] = store
            store._opens += 1
            if handle is not None:
                store._handles.append(handle)
            return store

    def __init__(
        self,
        storage: Any = None,
        *,
        m: int = 16,
        ef_construction: int = 200,
        ef_search: int | None = None,
        background_linking: bool = True,
        threads: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        hold_vectors: bool = False,
    ) -> None:
        settings = (m, ef_construction, ef_search, background_linking, threads,
                    None if cache_dir is None else os.fspath(cache_dir), hold_vectors)
        if hasattr(self, "_settings"):  # this database's store is already open: share it
            if settings != self._settings:
                self.close()
                raise ConfigurationError(
                    "an HnswVectorStore with other settings is already open on this database; "
                    "open it with the same m, ef_construction, ef_search, background_linking, "
                    "threads, cache_dir and hold_vectors")
            return
        try:
            for label, value in (("m", m), ("ef_construction", ef_construction)):
                if not _is_int(value) or value < 1:
                    raise InvalidArgumentError(f"{label} must be a positive integer, got {value!r}")
            if threads is not None and (not _is_int(threads) or threads < 1):
                raise InvalidArgumentError(f"threads must be a positive integer or None, got {threads!r}")
            self.threads = default_threads() if threads is None else threads
            if ef_search is not None and (not _is_int(ef_search) or ef_search < 1):
                raise InvalidArgumentError(
                    f"ef_search must be a positive integer or None, got {ef_search!r}")
            if not isinstance(hold_vectors, bool):
                raise InvalidArgumentError(f"hold_vectors must be True or False, got {hold_vectors!r}")
            self.m, self.ef_construction, self.ef_search = m, ef_construction, ef_search
            self.hold_vectors = hold_vectors
            self._lock = threading.RLock()
            self._loaded: dict[str, Loaded] = {}
            self._uncommitted: dict[str, set[str]] = {}  # ids upserted by the open transaction
            self._linker = Linker(self._loaded, weakly(self._save_due)) if background_linking else None
            if self._linker is not None:
                weakref.finalize(self, self._linker.stop)
            self.rows = rows_for(self._db, cache_dir)
            self.rows.remove_leftovers()
        except BaseException:
            if self._release():
                for handle in self._handles:  # the database this store opened for itself
                    handle.close()
            raise
        self._settings = settings

    # ---- indexes ----

    def create_index(self, name: str, dimension: int, metric: str = "cosine") -> None:
        """Create an index; the same dimension again is a no-op.

        Args:
            name: 1-63 letters, digits, ``_`` or ``-``.
            dimension: the length of its vectors.
            metric: ``"cosine"``, ``"euclidean"`` or ``"dotproduct"``.

        Raises DimensionMismatchError when ``name`` exists with another dimension.

        >>> store = HnswVectorStore()
        >>> store.create_index("docs", 3, metric="euclidean")
        >>> store.create_index("docs", 3)
        >>> store.create_index("docs", 4)
        Traceback (most recent call last):
        ...
        threadrecall.errors.DimensionMismatchError: index docs exists with dimension 3, not 4
        """
        _check_name(name)
        if not _is_int(dimension) or dimension < 1:
            raise InvalidArgumentError(f"dimension must be a positive integer, got {dimension!r}")
        if metric not in METRICS:
            raise InvalidArgumentError(
                f"metric must be one of {', '.join(METRICS)}, got {metric!r}"
            )
        existing = self.rows.create(name, dimension, metric)
        if existing is not None and existing != dimension:
            raise DimensionMismatchError(f"index {name} exists with dimension {existing}, not {dimension}")

    def describe_index(self, name: str) -> IndexStats:
        """Dimension, metric and vector count of an index.

        Args:
            name: the index.

        >>> store = HnswVectorStore()
        >>> store.create_index("docs", 2)
        >>> store.describe_index("docs")
        IndexStats(dimension=2, metric='cosine', count=0)
        """
        dimension, metric, _ = self._info(name)
        return IndexStats(dimension=dimension, metric=metric, count=self.rows.count(name))

    def list_indexes(self) -> list[str]:
        """Names of every index, sorted.

        >>> store = HnswVectorStore()
        >>> store.create_index("b", 2); store.create_index("a", 2)
        >>> store.list_indexes()
        ['a', 'b']
        """
        return self.rows.names()

    def delete_index(self, name: str) -> None:
        """Delete an index, its vectors and its index file.

        Args:
            name: the index (``IndexNotFoundError`` when it does not exist).

        >>> store = HnswVectorStore()
        >>> store.create_index("docs", 2)
        >>> store.delete_index("docs")
        >>> store.list_indexes()
        []
        """
        self._info(name)
        self.rows.drop(name, functools.partial(self._forget, name))

    # ---- vectors ----

    def upsert(
        self,
        name: str,
        vectors: Any,
        *,
        ids: Sequence[str] | None = None,
        metadata: Sequence[dict[str, Any]] | None = None,
    ) -> list[str]:
        """Insert or replace vectors by id; returns the ids (uuid4 strings when none given).

        Args:
            name: the index.
            vectors: a ``(n, dimension)`` array or a list of ``n`` vectors.
            ids: one non-empty string per vector; a repeated id keeps its last vector.
            metadata: one JSON dict per vector, what ``filter`` reads.

        >>> store = HnswVectorStore()
        >>> store.create_index("docs", 2)
        >>> store.upsert("docs", [[1, 0], [0, 1]], ids=["a", "b"], metadata=[{"k": 1}, {"k": 2}])
        ['a', 'b']
        >>> len(store.upsert("docs", [[1, 1]])[0])  # a generated id
        36
        """
        loaded = self._loaded.get(name)  # a loaded index exists: no catalogue lookup needed
        dimension = loaded.index.dim if loaded is not None else self._info(name)[0]
        matrix = _as_matrix(vectors, dimension)
        n = len(matrix)
        ids = [str(uuid.uuid4()) for _ in range(n)] if ids is None else list(ids)
        metadata = [{} for _ in range(n)] if metadata is None else list(metadata)
        if len(ids) != n or len(metadata) != n:
            raise InvalidArgumentError(
                f"{n} vectors but {len(ids)} ids and {len(metadata)} metadata entries"
            )
        if any(not isinstance(i, str) or not i.strip() for i in ids):
            raise InvalidArgumentError("vector ids must be non-empty strings")
        for i in ids:
            check_name(i, "a vector id")
        if any(not isinstance(m, dict) for m in metadata):
            raise InvalidArgumentError("each metadata entry must be a dict")
        if n == 0:
            return []
        if not self.rows.shared:
            self._load(name)  # so the graph is current before this write reaches it
        # Last occurrence of a repeated id wins, as it would one at a time.
        last = {i: k for k, i in enumerate(ids)}
        keep = sorted(last.values())
        for k in keep:
            check_json(metadata[k], f"the metadata of vector {ids[k]}")
        texts = [dumps(metadata[k]) for k in keep]
        rows_ids = [ids[k] for k in keep]
        rows = matrix[keep]
        with self.rows.transaction():
            replacing = True
            if not self.rows.shared:
                # Ids new to the database need no delete (a join over every row of the
                # table); the loaded index knows the committed ids, `unsaved` this
                # transaction's.
                loaded = self._loaded[name]
                unsaved = self._uncommitted.setdefault(name, set())
                replacing = any(i in unsaved or i in loaded.index for i in rows_ids)
                unsaved.update(rows_ids)
                self.rows.on_commit(unsaved.clear)
            generation = self.rows.write(name, rows_ids, rows, texts, replacing)
            if not self.rows.shared:
                self.rows.on_commit(
                    functools.partial(self._apply_upsert, name, generation, rows_ids, rows, texts))
        return ids

    def update_metadata(self, name: str, ids: Sequence[str], metadata: Sequence[dict[str, Any]]) -> list[str]:
        """Replace the metadata of stored vectors, keeping the vectors; returns the ids that
        were stored (unknown ids are skipped).

        Args:
            name: the index.
            ids: the vectors to change.
            metadata: one JSON dict per id, replacing the stored one.

        >>> store = HnswVectorStore()
        >>> store.create_index("docs", 2)
        >>> _ = store.upsert("docs", [[1, 0]], ids=["a"], metadata=[{"k": 1}])
        >>> store.update_metadata("docs", ["a", "unknown"], [{"k": 2}, {"k": 3}])
        ['a']
        >>> [r.id for r in store.query("docs", [1, 0], filter={"k": 2})]
        ['a']
"""
        dimension = self._info(name)[0]
        ids, metadata = list(ids), list(metadata)
        if len(ids) != len(metadata):
            raise InvalidArgumentError(f"{len(ids)} ids but {len(metadata)} metadata entries")
        if any(not isinstance(m, dict) for m in metadata):
            raise InvalidArgumentError("each metadata entry must be a dict")
        with self.rows.transaction():
            stored: dict[str, bytes] = {}
            for start in range(0, len(ids), 1_000):
                rows = self.rows.fetch(name, ids[start:start + 1_000], vectors=True)
                stored.update((r[0], bytes(r[2])) for r in rows)
            keep = [k for k, i in enumerate(ids) if i in stored]
            if not keep:
                return []
            found = [ids[k] for k in keep]
            blob = b"".join(stored[i] for i in found)
            if len(blob) != len(found) * dimension * 4:
                raise IndexCorruptError(f"a stored vector of {name} is not {dimension} float32 values")
            matrix = np.frombuffer(blob, dtype="<f4").astype(np.float32).reshape(len(found), dimension)
            self.upsert(name, matrix, ids=found, metadata=[metadata[k] for k in keep])
        return found

    def query(
        self,
        name: str,
        vector: Any,
        *,
        top_k: int = 10,
        filter: dict[str, Any] | None = None,
        include_vector: bool = False,
    ) -> list[QueryResult]:
        """The ``top_k`` closest vectors passing ``filter``, closest first.

        ``score`` is larger when closer: cosine similarity, dot product, or minus the L2
        distance. ``metadata`` is the stored metadata dict.

        Args:
            name: the index.
            vector: the query vector.
            top_k: how many results at most.
            filter: a Mongo-style filter over the stored metadata (``$eq``, ``$in``, ``$and``...).
            include_vector: also return each result's stored vector.

        >>> store = HnswVectorStore()
        >>> store.create_index("docs", 2)
        >>> _ = store.upsert("docs", [[1, 0], [0, 1]], ids=["a", "b"], metadata=[{"k": 1}, {"k": 2}])
        >>> [(r.id, round(r.score, 3), r.metadata) for r in store.query("docs", [1, 0], top_k=1)]
        [('a', 1.0, {'k': 1})]
        >>> hit = store.query("docs", [1, 0], filter={"k": {"$gte": 2}}, include_vector=True)[0]
        >>> hit.id, hit.vector.tolist()
        ('b', [0.0, 1.0])
        """
        if include_vector:
            return self._query_with_vectors(name, vector, top_k, filter)
        loaded = self._loaded.get(name)  # a loaded index of this name: the name is valid
        if loaded is None or self.rows.shared:
            loaded = self._current(name)
        if type(top_k) is not int or not 0 < top_k < _LARGEST_K:
            if not _is_int(top_k) or top_k < 1:
                raise InvalidArgumentError(f"top_k must be a positive integer, got {top_k!r}")
            top_k = min(int(top_k), _LARGEST_K)  # the core returns no more hits than vectors
        if type(vector) is not np.ndarray or vector.dtype != np.float32 or vector.ndim != 1:
            vector = _as_matrix(vector, loaded.index.dim, single=True)[0]
        # One crossing: the core reads the filter (refusing a lone surrogate in it), searches
        # and builds the results, each holding its vector's metadata text, decoded only when
        # read. A vector written through the core alone holds none: its text is read here.
        flt = None if filter == {} else filter
        results, missing = loaded.index.query(vector, top_k, flt, self.ef_search,
                                              result=QueryResult)
        if missing:
            fetched = {r[0]: r[1] for r in self.rows.fetch(name, missing)}
            kept = []
            for result in results:
                state = result.__dict__
                if "_text" not in state:
                    text = fetched.get(result.id)
                    if text is None:
                        continue  # deleted since
                    state["_text"] = text
                kept.append(result)
            results = kept
        return results

    def _query_with_vectors(self, name: str, vector: Any, top_k: int,
                            filter: dict[str, Any] | None) -> list[QueryResult]:
        """``query(include_vector=True)``: the hits' texts and vectors read from the database."""
        hits = self.search_ids(name, vector, top_k=top_k, filter=filter)
        if not hits:
            return []
        rows = self.rows.fetch(name, [h[0] for h in hits], vectors=True)
        found = {r[0]: r for r in rows}
        return [QueryResult(id=i, score=float(score), metadata=json.loads(found[i][1]),
                            vector=np.frombuffer(bytes(found[i][2]), dtype="<f4").astype(np.float32))
                for i, score in hits if i in found]  # the others were deleted since

    def search_ids(self, name: str, vector: Any, *, top_k: int = 10,
                   filter: dict[str, Any] | None = None) -> list[tuple[str, float]]:
        """``query`` without the metadata: ``(id, score)`` pairs, closest first.

        It reads no rows from the database, so it is the fast path for callers that know
        what they stored under each id (over a shared database, one query first checks that
        the index is current, and brings what other processes wrote).

        Args:
            name: the index.
            vector: the query vector.
            top_k: how many results at most.
            filter: a Mongo-style filter over the stored metadata.

        >>> store = HnswVectorStore()
        >>> store.create_index("docs", 2)
        >>> _ = store.upsert("docs", [[1, 0], [0, 1]], ids=["a", "b"], metadata=[{"k": 1}, {"k": 2}])
        >>> [(i, round(s, 3)) for i, s in store.search_ids("docs", [0, 1], top_k=2, filter={"k": 2})]
        [('b', 1.0)]
        """
        _check_name(name)
        return self._search(self._current(name), vector, top_k, filter)

    @property
    def shared(self) -> bool:
        """Whether other processes write these indexes (over PostgreSQL): each process's
        graph is then a cache, checked current before a search (or, through
        ``search_ids_deferred``, in the caller's next statement)."""
        return self.rows.shared

    def search_ids_deferred(self, name: str, vector: Any, *, top_k: int = 10,
                            filter: dict[str, Any] | None = None,
                            ) -> tuple[list[tuple[str, float]], Any]:
        """``search_ids`` on the index as this process holds it, with the check that it was
        current left to the caller: ``(pairs, freshness)``, where ``freshness`` (when not
        ``None``) is a ``Freshness`` to run in the caller's next statement. When it does not
        hold, catch up with ``search_ids`` and use its answer instead. ``freshness`` is
        ``None`` when there was nothing to defer: the pairs are then ``search_ids``'s own.

        Args:
            name: the index.
            vector: the query vector.
            top_k: how many results at most.
            filter: a Mongo-style filter over the stored metadata.

        >>> store = HnswVectorStore()
        >>> store.create_index("docs", 2)
        >>> _ = store.upsert("docs", [[1, 0], [0, 1]], ids=["a", "b"], metadata=[{"k": 1}, {"k": 2}])
        >>> pairs, freshness = store.search_ids_deferred("docs", [0, 1], top_k=1)
        >>> [i for i, _ in pairs], freshness
        (['b'], None)
        """
        _check_name(name)
        loaded = self._loaded.get(name)
        freshness = getattr(self.rows, "freshness", None)
        if (loaded is None or freshness is None or loaded.origin is None
                or self.rows.in_transaction):
            return self.search_ids(name, vector, top_k=top_k, filter=filter), None
        # Taken before the search: the index then reflects at least this generation.
        check = freshness(name, loaded.generation, loaded.origin, loaded.index.dim)
        return self._search(loaded, vector, top_k, filter), check

    def catch_up(self, name: str, freshness: Any) -> bool:
        """Apply what a ``freshness`` check that did not hold brought (the changes it read):
        ``True`` when the index now reflects that read, so a search of it (``search_ids_deferred``,
        whose new check need not be run) is as current as the read; ``False`` when the check
        brought nothing to apply or the index moved meanwhile (then ``search_ids``).

        Args:
            name: the index the check was taken on.
            freshness: the check, after the statement that ran it.

        >>> store = HnswVectorStore()
        >>> store.create_index("docs", 2)
        >>> store.catch_up("docs", None)  # an in-memory store defers nothing
        False
        """
        delta = getattr(freshness, "delta", None)
        if delta is None:
            return False
        with self._lock:
            loaded = self._loaded.get(name)
            if (loaded is None or loaded.origin != freshness.origin
                    or loaded.generation != freshness.since):
                return False
            loaded.apply(name, delta)
        self._link_backlog(loaded)
        self._wake_linker()
        return True

    def _search(self, loaded: Loaded, vector: Any, top_k: int,
                filter: dict[str, Any] | None) -> list[tuple[str, float]]:
        if not _is_int(top_k) or top_k < 1:
            raise InvalidArgumentError(f"top_k must be a positive integer, got {top_k!r}")
        check_texts(filter, "the filter")
        query = _as_matrix(vector, loaded.index.dim, single=True)[0]
        top_k = min(top_k, max(len(loaded.index), 1))  # no more hits than vectors, however large
        return loaded.index.search(query, top_k, filter if filter != {} else None, self.ef_search)

    def delete_vectors(
        self, name: str, *, ids: Sequence[str] | None = None, filter: dict[str, Any] | None = None
    ) -> None:
        """Delete vectors by id, by filter, or both (the union).

        Args:
            name: the index.
            ids: the ids to delete (unknown ids are ignored).
            filter: delete every vector whose metadata passes this filter.

        >>> store = HnswVectorStore()
        >>> store.create_index("docs", 2)
        >>> _ = store.upsert("docs", [[1, 0], [0, 1], [1, 1]], ids=["a", "b", "c"],
        ...                  metadata=[{"k": 1}, {"k": 2}, {"k": 3}])
        >>> store.delete_vectors("docs", ids=["a"], filter={"k": 3})
        >>> [r.id for r in store.query("docs", [1, 0])]
        ['b']
        """
        self._info(name)
        if ids is None and filter is None:
            raise InvalidArgumentError("delete_vectors needs ids or a filter")
        doomed = set()
        if ids is not None:
            ids = [ids] if isinstance(ids, str) else list(ids)
            if any(not isinstance(i, str) for i in ids):
                raise InvalidArgumentError("vector ids must be strings")
            for i in ids:
                check_name(i, "a vector id")
            doomed.update(ids)
        if filter is not None:
            check_texts(filter, "the filter")
            doomed.update(self._current(name).index.ids_where(filter))
        if not doomed:
            return
        doomed_list = sorted(doomed)
        with self.rows.transaction():
            generation = self.rows.delete(name, doomed_list)
            if not self.rows.shared:
                self.rows.on_commit(functools.partial(self._apply_delete, name, generation, doomed_list))

    # ---- lifecycle ----

    def link(self, name: str | None = None) -> None:
        """Link every waiting vector of ``name`` (default: of every loaded index) into its graph
        now, a chunk at a time so searches can run in between.

        Args:
            name: the index, or ``None`` for every loaded index.

        >>> store = HnswVectorStore(background_linking=False)
        >>> store.create_index("docs", 2)
        >>> _ = store.upsert("docs", [[1, 0]], ids=["a"])
        >>> store.link("docs")
        """
        if name is None:
            indexes = [loaded.index for loaded in list(self._loaded.values())]
        else:
            self._info(name)
            indexes = [self._load(name).index]
        for index in indexes:
            index.link_all(self.threads)

    def flush(self) -> None:
        """Save every index whose file lags behind the database or the linking (vectors
        still waiting to be linked are saved as waiting).

        >>> HnswVectorStore().flush()  # in memory: nothing to save
        """
        if not self.rows.in_memory:
            self._save_where(lambda loaded: loaded.stale)

    def close(self) -> None:
        """Close this user's handle. With the last one: stop the background linker, save the
        index files, and close the database if this store opened it.

        >>> HnswVectorStore().close()
        """
        if not self._release():
            return
        if self._linker is not None:
            self._linker.stop()
        self.flush()
        with self._lock:
            self._loaded.clear()
        self.rows.close()
        for handle in self._handles:
            handle.close()

    def _release(self) -> bool:
        """Drop one user; True when it was the last."""
        with _STORES_LOCK:
            self._opens -= 1
            if self._opens > 0:
                return False
            if _STORES.get(id(self._db)) is self:
                del _STORES[id(self._db)]
            return True

    def __enter__(self) -> HnswVectorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def index_path(self, name: str) -> Path | None:
        """Where the index file of ``name`` lives (None for an in-memory database, and over
        PostgreSQL without ``cache_dir``, where each process builds its index from the
        database).

        Args:
            name: the index.

        >>> HnswVectorStore().index_path("docs") is None
        True
        """
        return self.rows.index_path(name)

    # ---- internals ----

    def _info(self, name: str) -> tuple[int, str, int]:
        _check_name(name)
        row = self.rows.info(name)
        if row is None:
            raise IndexNotFoundError(f"index {name} does not exist")
        return row

    def _current(self, name: str) -> Loaded:
        """The in-memory index of ``name``, current with every write committed before this
        call (over a shared database: caught up with one query, rebuilt when it was deleted
        and created again)."""
        loaded = self._loaded.get(name)  # a loaded index exists: no catalogue lookup needed
        if loaded is None:
            self._info(name)
            loaded = self._load(name)
        if self.rows.shared:  # also after a load: another thread may have read it earlier
            loaded = self._refresh(name, loaded)
        return loaded

    def _refresh(self, name: str, loaded: Loaded) -> Loaded:
        """Bring ``loaded`` up to the committed state: the changes since its generation,
        applied unless another thread moved it meanwhile (then asked again from there)."""
        while True:
            since = loaded.generation
            try:
                delta = self.rows.changes(name, since, loaded.index.dim, loaded.origin)
            except IndexNotFoundError:
                self._forget(name)
                raise
            if delta.reset:  # deleted and created again elsewhere: rebuilt from nothing
                self._forget(name)
                return self._current(name)
            if delta.generation == since and not delta.removed and not delta.total:
                return loaded
            with self._lock:
                replaced = self._loaded.get(name) is not loaded
                moved = loaded.generation != since
                if not (replaced or moved):
                    loaded.apply(name, delta)
            if replaced:  # rebuilt or deleted by another thread meanwhile
                return self._current(name)
            if not moved:
                self._link_backlog(loaded)
                self._wake_linker()
                return loaded

    def _apply_upsert(self, name, generation, ids, rows, texts) -> None:
        with self._lock:
            loaded = self._loaded.get(name)
            if loaded is None:
                return  # loaded later, straight from the database
            add_stored(loaded.index, ids, rows, texts)
            self._advance(name, loaded, generation, len(ids))
        self._link_backlog(loaded)
        self._wake_linker()

    def _apply_delete(self, name, generation, ids) -> None:
        with self._lock:
            loaded = self._loaded.get(name)
            if loaded is None:
                return
            loaded.index.remove(ids)
            self._advance(name, loaded, generation, len(ids))

    def _link_backlog(self, loaded: Loaded) -> None:
        """Link a large backlog on ``threads`` threads (searches go on beside it): now, when
        this process's own write brought it; in the background over a shared database, where
        it was read (a rebuild, a catch-up) and the search that read it answers meanwhile
        from exact scans of the waiting vectors. A small one is left to the background
        linker. Without background linking everything waits for ``link()``."""
        if self._linker is None or loaded.index.pending < BULK_LINK_FROM:
            return
        if self.rows.shared:
            self._linker.link_backlog(loaded.index, self.threads)
        else:
            loaded.index.link_all(self.threads)

    def _wake_linker(self) -> None:
        if self._linker is not None:
            self._linker.wake()

    def _advance(self, name: str, loaded: Loaded, generation: int, changes: int) -> None:
        loaded.generation = generation
        loaded.changes += changes
        if self._linker is None and self._is_due(loaded):  # no background thread to save when idle
            self._save(name, loaded)

    def _save_due(self) -> None:
        """Save the index files that lag by enough changes (the linker calls this when idle,
        holding no lock, so writes go on while a file is written)."""
        self._save_where(self._is_due)

    def _save_where(self, wanted: Callable[[Loaded], bool]) -> None:
        """Save the loaded indexes ``wanted`` picks (chosen under the lock, saved outside it)."""
        with self._lock:
            chosen = [(name, loaded) for name, loaded in self._loaded.items() if wanted(loaded)]
        for name, loaded in chosen:
            self._save(name, loaded)

    def _is_due(self, loaded: Loaded) -> bool:
        """Whether enough changed since the save: database changes and vectors linked since.
        Over a shared database a large backlog (a rebuild, a catch-up with a bulk import) is
        saved once it is linked, not while it waits."""
        if self.rows.in_memory or (self.rows.shared and loaded.index.pending >= BULK_LINK_FROM):
            return False  # a backlog read from a shared database is saved once linked
        due = max(SAVE_AFTER_CHANGES, int(len(loaded.index) * SAVE_AFTER_FRACTION))
        linked = max(0, loaded.saved_pending - loaded.index.pending)
        return loaded.changes + linked >= due

    def _save(self, name: str, loaded: Loaded) -> None:
        """Save the index files of ``name`` (appending what changed since the last save).
        The store's lock is held only to read and then record the state saved: never while
        the files are written."""
        path = self.index_path(name)
        if path is None:
            return
        with loaded.saving:
            with self._lock:
                generation, changes = loaded.generation, loaded.changes
                if self._loaded.get(name) is not loaded:  # deleted meanwhile
                    return
            # The graph is read after the generation, so the file holds at least what its
            # tag says (a catch-up replays the rest harmlessly), never less.
            try:
                pending = loaded.index.save(str(path), generation, self.rows.origin(name) or "")
            except OSError as exc:
                raise StorageError(f"cannot save the index file {path}: {exc}") from exc
            with self._lock:
                if self._loaded.get(name) is not loaded:  # deleted while it was written
                    _unlink_files(path)
                    return
                loaded.saved, loaded.saved_pending = generation, pending
                loaded.changes -= changes

    def _forget(self, name: str) -> None:
        with self._lock:
            self._loaded.pop(name, None)
            path = self.index_path(name)
            if path is not None:
                _unlink_files(path)

    def _load(self, name: str) -> Loaded:
        """The in-memory index of ``name``: from its file if current, caught up, or rebuilt."""
        loaded = self._loaded.get(name)
        if loaded is not None:
            return loaded
        with self.rows.frozen(), self._lock:  # no writer may move the generation meanwhile
            loaded = self._loaded.get(name)
            if loaded is not None:
                return loaded
            loaded = self._loaded[name] = self._open(name)
            self._link_backlog(loaded)
            if loaded.saved is None and not self.rows.shared:  # rebuilt: its file is written at once
                self._save(name, loaded)
        self._wake_linker()  # a loaded file or a rebuild may bring vectors to link
        return loaded

    def _open(self, name: str) -> Loaded:
        dimension, metric, generation = self._info(name)
        path = self.index_path(name)
        if path is not None and path.is_dir():
            raise StorageError(
                f"a directory is where the index file {path} goes; move it away (the index is "
                "rebuilt from the database)")
        loaded = None
        if path is not None and path.exists():
            loaded = self._from_file(name, path, dimension, metric, generation)
        if loaded is None:
            loaded = Loaded(self._new_index(dimension, metric), 0, None)
            self._catch_up(name, loaded)
        return loaded

    def _from_file(self, name: str, path: Path, dimension: int, metric: str,
                   generation: int) -> Loaded | None:
        """The index saved in ``path``, caught up with the database; ``None`` when the file
        is not to be trusted (unreadable, of another database or creation of the index, of
        another dimension or metric, ahead of the database) or too old to catch up (the
        changes since its generation are pruned)."""
        try:
            index, file_generation, file_origin = _core.VectorIndex.load(str(path))
        except (IndexCorruptError, OSError):
            return None
        if not (file_origin == self.rows.origin(name)  # this database's, this creation's
                and index.dim == dimension
                and index.metric == metric
                and file_generation <= generation):
            return None
        if self.hold_vectors:
            try:
                index.hold_vectors(True)
            except StorageError:  # its vectors file cannot be read after all
                return None
        if index.texts_missing:  # a file of the previous format
            rows = self.rows.texts(name)
            index.fill_texts([r[0] for r in rows], [r[1] for r in rows])
        loaded = Loaded(index, file_generation, file_generation, file_origin)
        if file_generation < generation:
            delta = self.rows.changes(name, file_generation, dimension, file_origin)
            if delta.reset:
                return None
            loaded.apply(name, delta)
        return loaded

    def _new_index(self, dimension: int, metric: str) -> _core.VectorIndex:
        index = _core.VectorIndex(dimension, metric, m=self.m, ef_construction=self.ef_construction)
        if self.hold_vectors:
            index.hold_vectors(True)
        return index

    def _catch_up(self, name: str, loaded: Loaded) -> None:
        """Replay what was written after the index's generation (everything, for a new one)."""
        loaded.apply(name, self.rows.changes(name, loaded.generation, loaded.index.dim, loaded.origin))


def _unlink_files(path: Path) -> None:
    """Delete an index file and the vectors file beside it."""
    path.unlink(missing_ok=True)
    path.with_suffix(".vectors").unlink(missing_ok=True)
