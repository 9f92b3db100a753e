"""The embedded backend: DuckDB in one file (or ``:memory:``), written by one process."""

from .database import Database
from .storage import (
           DuckDBStorage,
           MessageRow,
           from_micros,
           message_of,
           messages_of,
           new_id,
           to_micros,
)

__all__ = ["Database", "DuckDBStorage", "MessageRow", "from_micros", "message_of", "messages_of", "new_id",
           "to_micros"]
