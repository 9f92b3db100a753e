"""The shared backend: PostgreSQL, for any number of processes on any number of machines."""

from .storage import PostgresStorage

__all__ = ["PostgresStorage"]
