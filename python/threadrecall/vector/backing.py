"""The database behind an ``HnswVectorStore``: which one its ``storage`` argument names, and
the rows backend that reads and writes its vectors there."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, InvalidArgumentError
from ..storage.duckdb import Database
from .rows import Rows
from .rows_duckdb import DuckDBRows

__all__ = ["database_of", "private", "rows_for"]


def database_of(storage: Any) -> tuple[Any, Any]:
    """The database a store keeps its vectors in (a DuckDB ``Database`` or a
    ``PostgresStorage``), and the storage handle it opened for it (None when the caller's
    storage is used)."""
    if storage is None or isinstance(storage, (str, Path)):
        from ..storage.duckdb import DuckDBStorage

        handle = DuckDBStorage(":memory:" if storage is None else storage)
        return handle.db, handle
    if isinstance(storage, Database):
        return storage, None
    if isinstance(getattr(storage, "db", None), Database):
        return storage.db, None
    from ..storage.postgres import PostgresStorage

    if isinstance(storage, PostgresStorage):
        return storage, None
    raise InvalidArgumentError(
        "storage must be a DuckDBStorage, a PostgresStorage, a Database, a database path or None")


def rows_for(db: Any, cache_dir: str | os.PathLike[str] | None = None) -> Rows:
    """The rows backend of ``db``; ``cache_dir``: where a store over PostgreSQL keeps its
    index files (see ``index_files``)."""
    if isinstance(db, Database):
        if cache_dir is not None:
            raise ConfigurationError(
                "cache_dir is for a store over PostgreSQL: over DuckDB the index files live "
                "beside the database")
        return DuckDBRows(db)
    from .rows_postgres import PostgresRows

    return PostgresRows(db, cache_dir)


def private(db: Any, handle: Any) -> bool:
    """Whether the store is the only user of its database (an in-memory one it opened)."""
    return isinstance(db, Database) and db.in_memory and handle is not None
