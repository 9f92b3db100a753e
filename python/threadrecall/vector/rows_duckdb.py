"""The rows of ``HnswVectorStore`` in DuckDB: every vector, its metadata, a generation per index.

One process at a time uses a DuckDB file, so the store's in-memory index follows its own
writes (applied after each commit) and the generation only matters when an index file is
opened: each write bumps the index's generation and stamps its rows with it; deletions are
kept with the generation that deleted them, so a file saved at generation ``g`` is caught up by
replaying what came after ``g``.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import IndexCorruptError
from ..storage.duckdb import Database
from .index_files import remove_partial_saves
from .rows import Delta

__all__ = ["DuckDBRows", "MIGRATIONS"]

# Rows read per batch while an index is caught up or rebuilt.
BATCH = 5_000


# Batches up to this size are inserted with bound values: for a few rows that costs less than
# registering an Arrow table and scanning it.
VALUES_ROWS = 16


def _packed(matrix: np.ndarray) -> pa.Array:
    """The rows of a float32 matrix as stored: one BLOB of little-endian float32 each."""
    n, dim = matrix.shape
    offsets = np.arange(0, (n + 1) * dim * 4, dim * 4, dtype=np.int64)
    data = np.ascontiguousarray(matrix, dtype="<f4")
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _unpacked(blobs: pa.Array, dim: int) -> np.ndarray:
    """The ``(len(blobs), dim)`` float32 matrix of stored vector BLOBs (``_packed`` reversed)."""
    n = len(blobs)
    width = np.int64 if pa.types.is_large_binary(blobs.type) else np.int32
    offsets = np.frombuffer(blobs.buffers()[1], dtype=width)[blobs.offset : blobs.offset + n + 1]
    if n == 0:
        return np.zeros((0, dim), np.float32)
    if blobs.null_count or not (np.diff(offsets) == dim * 4).all():
        raise IndexCorruptError(f"a stored vector is not {dim} float32 values")
    flat = np.frombuffer(blobs.buffers()[2], dtype="<f4", count=n * dim, offset=int(offsets[0]))
    return np.ascontiguousarray(flat, dtype=np.float32).reshape(n, dim)


def _pack_vectors(tx: Any) -> None:
    """Migration step: ``FLOAT[]`` vectors become BLOBs of little-endian float32 (half the cost
    to write). The table is rebuilt with the same columns in the same order, a page at a time."""
    tx.execute(
        """CREATE TABLE vector_rows_packed (
            index_name TEXT NOT NULL,
            id TEXT NOT NULL,
            vector BLOB NOT NULL,
            metadata TEXT NOT NULL,
            generation BIGINT NOT NULL,
            position INTEGER NOT NULL,
            PRIMARY KEY (index_name, id)
        )"""
    )
    ((end,),) = tx.execute("SELECT coalesce(max(rowid) + 1, 0) FROM vector_rows").fetchall()
    for start in range(0, end, BATCH):
        page = tx.sql(
            f"SELECT * FROM vector_rows WHERE rowid >= {start} AND rowid < {start + BATCH}"
        ).to_arrow_table()
        lists = page.column("vector").combine_chunks()
        values = np.asarray(lists.flatten().to_numpy(zero_copy_only=False), dtype="<f4")
        offsets = np.asarray(lists.offsets, dtype=np.int64)
        blobs = pa.Array.from_buffers(pa.large_binary(), len(lists), [
            None, pa.py_buffer((offsets - offsets[0]) * 4), pa.py_buffer(values)])
        tx.register("vector_page", page.set_column(2, "vector", blobs))
        try:
            tx.execute("INSERT INTO vector_rows_packed SELECT * FROM vector_page")
        finally:
            tx.unregister("vector_page")
    tx.execute("DROP TABLE vector_rows")
    tx.execute("ALTER TABLE vector_rows_packed RENAME TO vector_rows")


def _give_origins(tx: Any) -> None:
    """Each index gets an origin, a random id naming this creation of it in this database;
    index files carry it, so a file of another database or an earlier creation is never
    taken for this one's."""
    tx.execute("ALTER TABLE vector_indexes ADD COLUMN origin TEXT")
    for (name,) in tx.execute("SELECT name FROM vector_indexes").fetchall():
        tx.execute("UPDATE vector_indexes SET origin = ? WHERE name = ?", [str(uuid.uuid4()), name])


MIGRATIONS: list[str | Callable[[Any], None]] = [
    """CREATE TABLE vector_indexes (
        name TEXT PRIMARY KEY,
        dimension INTEGER NOT NULL,
        metric TEXT NOT NULL,
        generation BIGINT NOT NULL
    )""",
    """CREATE TABLE vector_rows (
        index_name TEXT NOT NULL,
        id TEXT NOT NULL,
        vector FLOAT[] NOT NULL,
        metadata TEXT NOT NULL,
        generation BIGINT NOT NULL,
        position INTEGER NOT NULL,
        PRIMARY KEY (index_name, id)
    )""",
    """CREATE TABLE vector_deletions (
        index_name TEXT NOT NULL,
        id TEXT NOT NULL,
        generation BIGINT NOT NULL,
        PRIMARY KEY (index_name, id)
    )""",
    _pack_vectors,
    # Vectors are stored uncompressed: their bytes do not compress, and trying costs the
    # database's checkpoints several times the writing itself.
    """CREATE TABLE vector_rows_plain (
        index_name TEXT NOT NULL,
        id TEXT NOT NULL,
        vector BLOB USING COMPRESSION uncompressed NOT NULL,
        metadata TEXT NOT NULL,
        generation BIGINT NOT NULL,
        position INTEGER NOT NULL,
        PRIMARY KEY (index_name, id)
    );
    INSERT INTO vector_rows_plain SELECT * FROM vector_rows;
    DROP TABLE vector_rows;
    ALTER TABLE vector_rows_plain RENAME TO vector_rows;
    """,
    _give_origins,
]


class DuckDBRows:
    """Vector rows in one DuckDB database (see the module docstring)."""

    shared = False  # one process per file: the index follows this process's commits

    def __init__(self, db: Database) -> None:
        self.db = db
        self.key = id(db)
        db.migrate("vector", MIGRATIONS)

    @property
    def in_memory(self) -> bool:
        return self.db.in_memory

    @property
    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def transaction(self) -> AbstractContextManager[Any]:
        return self.db.transaction()

    def frozen(self) -> AbstractContextManager[Any]:
        """A context in which no write moves a generation (while an index is loaded)."""
        return self.db.transaction()

    def on_commit(self, callback: Callable[[], None]) -> None:
        self.db.on_commit(callback)

    # ---- catalogue ----

    def info(self, name: str) -> tuple[int, str, int] | None:
        """``(dimension, metric, generation)`` of an index, or None."""
        return self.db.cursor().execute(
            "SELECT dimension, metric, generation FROM vector_indexes WHERE name = ?", [name]
        ).fetchone()

    def origin(self, name: str) -> str | None:
        """Which creation of the index this is (a random id given when it was created)."""
        row = self.db.cursor().execute("SELECT origin FROM vector_indexes WHERE name = ?", [name]).fetchone()
        return None if row is None else row[0]

    def names(self) -> list[str]:
        rows = self.db.cursor().execute("SELECT name FROM vector_indexes ORDER BY name").fetchall()
        return [r[0] for r in rows]

    def count(self, name: str) -> int:
        (count,) = self.db.cursor().execute(
            "SELECT count(*) FROM vector_rows WHERE index_name = ?", [name]).fetchone()
        return count

    def create(self, name: str, dimension: int, metric: str) -> int | None:
        """Create an index; the dimension of an existing one instead (nothing written)."""
        with self.db.transaction() as tx:
            row = tx.execute("SELECT dimension FROM vector_indexes WHERE name = ?", [name]).fetchone()
            if row is not None:
                return row[0]
            tx.execute("INSERT INTO vector_indexes (name, dimension, metric, generation, origin) "
                       "VALUES (?, ?, ?, 0, ?)", [name, dimension, metric, str(uuid.uuid4())])
        return None

    def drop(self, name: str, then: Callable[[], None]) -> None:
        """Delete an index and its rows; ``then`` runs once that commits."""
        with self.db.transaction() as tx:
            for table, column in (
                ("vector_rows", "index_name"),
                ("vector_deletions", "index_name"),
                ("vector_indexes", "name"),
            ):
                tx.execute(f"DELETE FROM {table} WHERE {column} = ?", [name])
            self.db.on_commit(then)

    # ---- rows ----

    def write(self, name: str, ids: list[str], matrix: np.ndarray, texts: list[str],
              replacing: bool) -> int:
        """Insert or replace rows in the open transaction; the generation they carry."""
        tx = self.db.cursor()
        generation = self._bump(tx, name)
        if replacing:  # delete then insert: INSERT OR REPLACE at a third of its cost
            tx.execute(
                "DELETE FROM vector_rows WHERE index_name = ? AND id IN (SELECT unnest(?::VARCHAR[]))",
                [name, ids],
            )
        if len(ids) <= VALUES_ROWS:  # a turn's few vectors: bound values, no Arrow scan
            blobs = np.ascontiguousarray(matrix, dtype="<f4")
            params = [v for k, i in enumerate(ids)
                      for v in (name, i, blobs[k].tobytes(), texts[k], generation, k)]
            tx.execute(f"INSERT INTO vector_rows VALUES {', '.join(['(?, ?, ?, ?, ?, ?)'] * len(ids))}",
                       params)
            return generation
        tx.register("vector_batch", pa.table({
            "id": ids,
            "vector": _packed(matrix),
            "metadata": texts,
            "position": pa.array(range(len(ids)), type=pa.int32()),
        }))
        try:
            tx.execute(
                "INSERT INTO vector_rows SELECT ?, id, vector, metadata, ?, position FROM vector_batch",
                [name, generation],
            )
        finally:
            tx.unregister("vector_batch")
        return generation

    def delete(self, name: str, ids: list[str]) -> int:
        """Delete rows by id in the open transaction; the generation of the deletion."""
        tx = self.db.cursor()
        generation = self._bump(tx, name)
        tx.execute(
            "DELETE FROM vector_rows WHERE index_name = ? AND id IN (SELECT unnest(?::VARCHAR[]))",
            [name, ids],
        )
        tx.execute(
            "INSERT OR REPLACE INTO vector_deletions SELECT ?, unnest(?::VARCHAR[]), ?",
            [name, ids, generation],
        )
        return generation

    def fetch(self, name: str, ids: list[str], vectors: bool = False) -> list[tuple[Any, ...]]:
        """``(id, metadata text[, vector bytes])`` of the stored rows among ``ids``."""
        columns = "id, metadata, vector" if vectors else "id, metadata"
        marks = ", ".join("?" * len(ids))
        return self.db.cursor().execute(
            f"SELECT {columns} FROM vector_rows WHERE index_name = ? AND id IN ({marks})",
            [name, *ids],
        ).fetchall()

    def texts(self, name: str) -> list[tuple[str, str]]:
        """``(id, metadata text)`` of every stored row."""
        return self.db.cursor().execute(
            "SELECT id, metadata FROM vector_rows WHERE index_name = ?", [name]).fetchall()

    def changes(self, name: str, since: int, dim: int, origin: str | None = None) -> Delta:
        """What was written after generation ``since``: deleted ids, then the rows (in write
        order), up to the current generation. In that order an id deleted and written again
        (its deletion record is kept) ends up present."""
        cur = self.db.cursor()
        (generation,) = cur.execute(
            "SELECT generation FROM vector_indexes WHERE name = ?", [name]).fetchone()
        gone = cur.execute(
            "SELECT id FROM vector_deletions WHERE index_name = ? AND generation > ?", [name, since]
        ).fetchall()
        (total,) = cur.execute(
            "SELECT count(*) FROM vector_rows WHERE index_name = ? AND generation > ?", [name, since]
        ).fetchone()
        result = cur.execute(
            "SELECT id, vector, metadata FROM vector_rows WHERE index_name = ? AND generation > ? "
            "ORDER BY generation, position",
            [name, since],
        )
        with warnings.catch_warnings():  # the extra copy it warns about is one batch at a time
            warnings.simplefilter("ignore", UserWarning)
            reader = result.to_arrow_reader(BATCH)

        def batches() -> Iterator[tuple[list[str], np.ndarray, list[str]]]:
            for batch in reader:
                yield (batch.column("id").to_pylist(), _unpacked(batch.column("vector"), dim),
                       batch.column("metadata").to_pylist())

        return Delta(generation, [g[0] for g in gone], total, batches())

    def _bump(self, tx: Any, name: str) -> int:
        (generation,) = tx.execute(
            "UPDATE vector_indexes SET generation = generation + 1 WHERE name = ? RETURNING generation",
            [name],
        ).fetchone()
        return generation

    # ---- index files ----

    def index_path(self, name: str) -> Path | None:
        return None if self.db.in_memory else Path(f"{self.db.path}.{name}.hnsw")

    def remove_leftovers(self) -> None:
        """Delete the partial index files of saves cut short in an earlier process (only one
        process at a time opens a database file, so none of them is still being written; a
        store opens once per database in a process, before it saves anything)."""
        if not self.db.in_memory:
            db = Path(self.db.path)
            remove_partial_saves(db.parent, db.name)

    def close(self) -> None:
        pass
