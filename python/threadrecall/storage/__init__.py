"""Storage backends. DuckDB is the embedded default."""

from .duckdb import Database
from .duckdb import DuckDBStorage

__all__ = ["Database", "DuckDBStorage"]
