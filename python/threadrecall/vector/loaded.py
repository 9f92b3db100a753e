"""An index held in memory by the HNSW store: its graph and what the store knows of it."""

from __future__ import annotations

import json
import threading

import numpy as np

from .. import _core
from ..errors import InvalidArgumentError
from .rows import Delta

__all__ = ["Loaded", "add_stored"]

# Rebuilds of at least this many vectors show a progress bar.
PROGRESS_FROM = 20_000


class Loaded:
    """One index held in memory: the graph, the generation it reflects, the last save; each
    vector of the index keeps its committed metadata text."""

    def __init__(self, index: _core.VectorIndex, generation: int, saved: int | None,
                 origin: str | None = None) -> None:
        self.index = index
        self.generation = generation
        self.origin = origin  # which creation of the index (shared databases)
        self.saved = saved
        self.saved_pending = index.pending  # vectors waiting to be linked, as the file has them
        self.changes = 0
        self.saving = threading.Lock()  # one save at a time: each appends to what the last wrote

    @property
    def stale(self) -> bool:
        """Whether the file lags behind: new database changes, linking done or a search
        breadth measured since the save, or a file of the previous format."""
        return self.saved != self.generation or self.saved_pending != self.index.pending or self.index.outdated

    def apply(self, name: str, delta: Delta) -> None:
        """Replay the database changes ``delta`` of index ``name``. Deletions first, then
        rows: an id deleted and written again ends up present."""
        if delta.removed:
            self.index.remove(delta.removed)
        progress = None
        if delta.total >= PROGRESS_FROM:
            from tqdm import tqdm

            progress = tqdm(total=delta.total, desc=f"indexing {name}", unit="vec")
        for ids, vectors, texts in delta.batches:
            add_stored(self.index, ids, vectors, texts)
            if progress is not None:
                progress.update(len(ids))
        if progress is not None:
            progress.close()
        self.generation = delta.generation
        self.origin = delta.origin
        self.changes += delta.total + len(delta.removed)


def add_stored(index: _core.VectorIndex, ids: list[str], vectors: np.ndarray, texts: list[str]) -> None:
    """Add vectors with their metadata as stored in the database (JSON texts, which they
    keep), so the graph filters exactly as a rebuilt one would. Texts holding NaN or
    infinities, which only Python's JSON reads, are read by Python."""
    try:
        index.add(ids, vectors, metadata_json=texts)
    except InvalidArgumentError:
        index.add(ids, vectors, [json.loads(t) for t in texts], metadata_json=texts)
