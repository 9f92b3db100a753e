"""Where the index files of ``HnswVectorStore`` go, and the partial ones a crash leaves.

Over DuckDB they lie beside the database (one process per file). Over PostgreSQL they are an
optional local cache (``HnswVectorStore(pg, cache_dir=...)``), never the truth: a folder
holds numbered sets of index files per schema, ``<schema>.<k>.<index>.hnsw`` with their
``.vectors``, and each set is used by one process at a time, the one holding an exclusive
``flock`` on ``<schema>.<k>.lock``. A process takes the first free set, so the workers of a
machine each keep their own, and one that restarts finds a set an earlier worker saved: it
loads it and catches up from the database instead of building its graph again. The lock
goes with the process however it ends, and a set's files are checked like any index file
(the index's origin and generation, checksums), so a set left by another database, an
older creation of the index, or a save cut short is rebuilt, not trusted.
"""

from __future__ import annotations

import fcntl
import glob
import itertools
import os
from pathlib import Path

from ..errors import ConfigurationError

__all__ = ["CacheSlot", "remove_partial_saves"]


def remove_partial_saves(folder: Path, prefix: str) -> None:
    """Delete the partial files of saves cut short, of the index files named ``<prefix>.*``
    in ``folder`` (call it only where no other process is saving those files)."""
    escaped = glob.escape(prefix)
    for pattern in (f"{escaped}.*.hnsw.*.part*", f"{escaped}.*.hnsw.tmp", f"{escaped}.*.vectors.tmp"):
        for part in folder.glob(pattern):
            part.unlink(missing_ok=True)


class CacheSlot:
    """The first set of index files in ``folder`` for ``schema`` that no other holder has,
    held until ``release`` (or the process's end).

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> first, second = CacheSlot(folder, "app"), CacheSlot(folder, "app")
    >>> first.path("docs").name, second.path("docs").name
    ('app.0.docs.hnsw', 'app.1.docs.hnsw')
    >>> first.release(); CacheSlot(folder, "app").path("docs").name
    'app.0.docs.hnsw'
    """

    def __init__(self, folder: str | os.PathLike[str], schema: str) -> None:
        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            for k in itertools.count():
                lock = os.open(self.folder / f"{schema}.{k}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(lock)
                    continue
                self._lock: int | None = lock
                self.prefix = f"{schema}.{k}"
                break
        except OSError as exc:
            raise ConfigurationError(f"cannot use {self.folder} as the index cache: {exc}") from exc
        remove_partial_saves(self.folder, self.prefix)

    def path(self, name: str) -> Path:
        return self.folder / f"{self.prefix}.{name}.hnsw"

    def release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
