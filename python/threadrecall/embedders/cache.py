"""``CachedEmbedder``: an LRU of vectors in front of any embedder, and ``shared_cache``.

Entries are keyed by a blake2b digest of the model id and the text, so two embedders with
different models never share a vector. When the inner embedder embeds queries differently
(it has ``embed_query``), query vectors are keyed apart from document vectors of the same
text. Only the texts missing from the cache reach the inner embedder, de-duplicated, in one
batch call.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import weakref
from collections import OrderedDict

import numpy as np

from ..errors import DimensionMismatchError, InvalidArgumentError
from .base import Embedder, check_texts

__all__ = ["DEFAULT_MAX_ENTRIES", "CachedEmbedder", "shared_cache"]

DEFAULT_MAX_ENTRIES = 1000


class CachedEmbedder:
    """Wraps ``inner`` with a thread-safe LRU of at most ``max_entries`` vectors.

    ``model_id`` and ``dimension`` are the inner embedder's. ``hits`` counts texts answered
    from the cache (including repeats inside one batch), ``misses`` texts the inner embedder
    had to embed.

    >>> from threadrecall.embedders import HashEmbedder
    >>> cached = CachedEmbedder(HashEmbedder(dim=8))
    >>> _ = cached.embed(["a", "b", "a"])
    >>> _ = cached.embed(["b"])
    >>> cached.hits, cached.misses
    (2, 2)
    """

    def __init__(self, inner: Embedder, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if isinstance(inner, CachedEmbedder):
            raise InvalidArgumentError("the embedder is already cached")
        if not isinstance(inner, Embedder):
            raise InvalidArgumentError(
                f"CachedEmbedder needs an Embedder (model_id, dimension, embed, aembed), "
                f"got {type(inner).__name__}"
            )
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise InvalidArgumentError(
                f"max_entries must be a positive integer, got {max_entries!r}"
            )
        self.inner = inner
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return (
            f"CachedEmbedder({self.inner!r}, max_entries={self.max_entries}, "
            f"hits={self.hits}, misses={self.misses})"
        )

    def clear(self) -> None:
        """Forget every cached vector (the counters are kept)."""
        with self._lock:
            self._entries.clear()

    @property
    def asymmetric(self) -> bool:
        """Whether the inner embedder embeds queries its own way (it has ``embed_query``)."""
        return callable(getattr(self.inner, "embed_query", None))

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``, asking the inner embedder only for the ones not cached."""
        items, keys, found, missing = self._lookup(texts)
        fresh = self.inner.embed(list(missing.values())) if missing else None
        return self._assemble(items, keys, found, missing, fresh)

    async def aembed(self, texts: list[str]) -> np.ndarray:
        """The async twin of :meth:`embed` (uses the inner embedder's ``aembed``)."""
        items, keys, found, missing = self._lookup(texts)
        fresh = await self.inner.aembed(list(missing.values())) if missing else None
        return self._assemble(items, keys, found, missing, fresh)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        """Embed search queries: the inner ``embed_query`` when it has one, else ``embed``.

        >>> from threadrecall.embedders import HashEmbedder
        >>> cached = CachedEmbedder(HashEmbedder(dim=8))
        >>> bool((cached.embed_query(["a"]) == cached.embed(["a"])).all()), cached.hits
        (True, 1)
        """
        query = self.asymmetric
        items, keys, found, missing = self._lookup(texts, query=query)
        texts_missing = list(missing.values())
        fresh = None
        if missing:
            embed = self.inner.embed_query if query else self.inner.embed  # type: ignore[attr-defined]
            fresh = embed(texts_missing)
        return self._assemble(items, keys, found, missing, fresh)

    async def aembed_query(self, texts: list[str]) -> np.ndarray:
        """The async twin of :meth:`embed_query` (the inner ``aembed_query`` when it has one)."""
        query = self.asymmetric
        items, keys, found, missing = self._lookup(texts, query=query)
        texts_missing = list(missing.values())
        fresh = None
        if missing and not query:
            fresh = await self.inner.aembed(texts_missing)
        elif missing:
            twin = getattr(self.inner, "aembed_query", None)
            if callable(twin):
                fresh = await twin(texts_missing)
            else:
                fresh = await asyncio.to_thread(self.inner.embed_query, texts_missing)  # type: ignore[attr-defined]
        return self._assemble(items, keys, found, missing, fresh)

    def _key(self, model_id: str, text: str, query: bool = False) -> bytes:
        digest = hashlib.blake2b(model_id.encode("utf-8"), digest_size=16)
        digest.update(b"\x01query\x00" if query else b"\x00")
        digest.update(text.encode("utf-8", "surrogatepass"))
        return digest.digest()

    def _lookup(
        self, texts: list[str], *, query: bool = False
    ) -> tuple[list[str], list[bytes], dict[bytes, np.ndarray], dict[bytes, str]]:
        """The texts, their keys (query keys apart when ``query``), the cached vectors found,
        and the distinct texts missing (by key)."""
        items = check_texts(texts)
        model_id = self.model_id
        keys = [self._key(model_id, text, query) for text in items]
        found: dict[bytes, np.ndarray] = {}
        missing: dict[bytes, str] = {}
        with self._lock:
            for key, text in zip(keys, items):
                if key in found or key in missing:
                    continue
                vector = self._entries.get(key)
                if vector is None:
                    missing[key] = text
                else:
                    self._entries.move_to_end(key)
                    found[key] = vector
            self.misses += len(missing)
            self.hits += len(items) - len(missing)
        return items, keys, found, missing

    def _assemble(
        self,
        items: list[str],
        keys: list[bytes],
        found: dict[bytes, np.ndarray],
        missing: dict[bytes, str],
        fresh: np.ndarray | None,
    ) -> np.ndarray:
        """Store the fresh vectors and build the result in the order of ``items``."""
        dim = self.dimension
        if fresh is not None:
            fresh = np.asarray(fresh, dtype=np.float32)
            if fresh.shape != (len(missing), dim):
                raise DimensionMismatchError(
                    f"{self.model_id} returned shape {fresh.shape} for {len(missing)} texts; "
                    f"expected ({len(missing)}, {dim})"
                )
            new = dict(zip(missing, fresh))
            found.update(new)
            with self._lock:
                for key, row in new.items():
                    self._entries[key] = row.copy()
                    self._entries.move_to_end(key)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        if not items:
            return np.empty((0, dim), dtype=np.float32)
        if fresh is not None and len(missing) == len(items):  # every text new and distinct
            return fresh
        return np.stack([found[key] for key in keys]).astype(np.float32, copy=False)


_shared: weakref.WeakValueDictionary[int, CachedEmbedder] = weakref.WeakValueDictionary()
_shared_lock = threading.Lock()


def shared_cache(embedder: Embedder, max_entries: int = DEFAULT_MAX_ENTRIES) -> CachedEmbedder:
    """The process-wide ``CachedEmbedder`` of ``embedder``: the same object for the same instance.

    A ``CachedEmbedder`` is returned unchanged. ``max_entries`` applies when the cache is
    first made. The cache lives while anyone (a ``Memory``, a processor) holds it.

    >>> from threadrecall.embedders import HashEmbedder
    >>> embedder = HashEmbedder(dim=8)
    >>> shared_cache(embedder) is shared_cache(embedder)
    True
    """
    if isinstance(embedder, CachedEmbedder):
        return embedder
    with _shared_lock:
        cached = _shared.get(id(embedder))
        if cached is None or cached.inner is not embedder:
            cached = CachedEmbedder(embedder, max_entries)
            _shared[id(embedder)] = cached
        return cached
