"""Vector stores: the protocol, the default Rust HNSW store over DuckDB, and ``PgVector``
(pgvector inside PostgreSQL, imported on first use since psycopg is optional)."""

from typing import Any

from .base import VectorStore
from .hnsw import HnswVectorStore

__all__ = ["HnswVectorStore", "PgVector", "VectorStore"]


def __getattr__(name: str) -> Any:
    if name == "PgVector":
        from .pgvector import PgVector

        return PgVector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
