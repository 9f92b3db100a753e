"""An index held in memory by the HNSW store: its graph and what the store knows of it."""

from __future__ import annotations

import itertools
import threading
from typing import Sequence

from .. import _core

__all__ = ["Loaded"]

# Metadata texts kept in memory per index, so a query needs no database read.
METADATA_CACHE = 100_000


class Loaded:
    """One index held in memory: the graph, the generation it reflects, the last save, and
    the committed metadata texts of recently written or returned ids."""

    def __init__(self, index: _core.VectorIndex, generation: int, saved: int | None,
                 origin: str | None = None) -> None:
        self.index = index
        self.generation = generation
        self.origin = origin  # which creation of the index (shared databases)
        self.saved = saved
        self.saved_pending = index.pending  # vectors waiting to be linked, as the file has them
        self.changes = 0
        self.metadata: dict[str, str] = {}
        self.saving = threading.Lock()  # one save at a time: each appends to what the last wrote

    @property
    def stale(self) -> bool:
        """Whether the file lags behind: new database changes, linking done or a search
        breadth measured since the save, or a file of the previous format."""
        return self.saved != self.generation or self.saved_pending != self.index.pending or self.index.outdated

    def remember(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self.metadata.update(zip(ids, texts))
        for stale in list(itertools.islice(self.metadata, max(0, len(self.metadata) - METADATA_CACHE))):
            del self.metadata[stale]
