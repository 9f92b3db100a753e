"""Where ``HnswVectorStore`` keeps its vectors: the interface of a row backend.

The rows are the truth, the in-memory HNSW index a cache of them. A backend stores each
index's rows (id, float32 vector, metadata as JSON text) and a generation per index that
orders its writes, and answers ``changes(name, since)``: what to replay on an index that
reflects generation ``since`` to bring it to the current one. ``rows_duckdb`` (one process per
file) and ``rows_postgres`` (any number of processes) implement it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = ["Delta", "Rows"]


@dataclass
class Delta:
    """The changes after a generation: remove ``removed``, then add ``batches`` (``(ids,
    vectors, metadata texts)``, ``total`` rows in all); the index then reflects
    ``generation``. ``reset``: the index must be rebuilt from nothing instead (the rows it was
    built from are gone, e.g. the index was deleted and created again)."""

    generation: int
    removed: list[str]
    total: int
    batches: Iterator[tuple[list[str], np.ndarray, list[str]]]
    reset: bool = False
    origin: str | None = None  # which creation of the index the rows belong to


class Rows(Protocol):
    """What ``HnswVectorStore`` needs of the database its vectors live in."""

    #: Other processes write too: the index catches up before each search, and its own
    #: writes reach it that way (not applied at commit).
    shared: bool
    #: Identifies the database within the process (one store per database).
    key: int

    @property
    def in_memory(self) -> bool: ...
    @property
    def in_transaction(self) -> bool: ...
    def transaction(self) -> AbstractContextManager[Any]: ...
    def frozen(self) -> AbstractContextManager[Any]: ...
    def on_commit(self, callback: Callable[[], None]) -> None: ...

    def info(self, name: str) -> tuple[int, str, int] | None: ...
    def origin(self, name: str) -> str | None: ...
    def names(self) -> list[str]: ...
    def count(self, name: str) -> int: ...
    def create(self, name: str, dimension: int, metric: str) -> int | None: ...
    def drop(self, name: str, then: Callable[[], None]) -> None: ...

    def write(self, name: str, ids: list[str], matrix: np.ndarray, texts: list[str],
              replacing: bool) -> int | None: ...
    def delete(self, name: str, ids: list[str]) -> int | None: ...
    def fetch(self, name: str, ids: list[str], vectors: bool = False) -> list[tuple[Any, ...]]: ...
    def texts(self, name: str) -> list[tuple[str, str]]: ...
    def changes(self, name: str, since: int, dim: int, origin: str | None = None) -> Delta: ...

    def index_path(self, name: str) -> Path | None: ...
    def remove_leftovers(self) -> None: ...
    def close(self) -> None: ...
