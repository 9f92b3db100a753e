"""Storage backends behind one protocol: DuckDB (the embedded default) and PostgreSQL."""

from typing import Any

from .base import Changes, Storage
from .duckdb import Database, DuckDBStorage
from .replica import Replica

__all__ = ["Changes", "Database", "DuckDBStorage", "PostgresStorage", "Replica", "Storage"]


def __getattr__(name: str) -> Any:
    if name == "PostgresStorage":  # imported on use: psycopg is an optional dependency
        from .postgres import PostgresStorage

        return PostgresStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
