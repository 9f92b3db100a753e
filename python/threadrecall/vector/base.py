"""The vector store protocol: what Memory needs from any vector backend."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..types import IndexStats, QueryResult

__all__ = ["AsyncTwins", "VectorStore"]


@runtime_checkable
class VectorStore(Protocol):
    """Named indexes of vectors with shallow metadata and Mongo-style filters."""

    def create_index(self, name: str, dimension: int, metric: str = "cosine") -> None:
        """Create an index; same dimension again is a no-op, another raises DimensionMismatchError."""

    def upsert(
        self,
        name: str,
        vectors: Any,
        *,
        ids: Sequence[str] | None = None,
        metadata: Sequence[dict[str, Any]] | None = None,
    ) -> list[str]:
        """Insert or replace vectors by id (uuid4 ids when none are given); return the ids."""

    def query(
        self,
        name: str,
        vector: Any,
        *,
        top_k: int = 10,
        filter: dict[str, Any] | None = None,
        include_vector: bool = False,
    ) -> list[QueryResult]:
        """The ``top_k`` closest vectors passing ``filter``, closest first."""

    def delete_vectors(
        self, name: str, *, ids: Sequence[str] | None = None, filter: dict[str, Any] | None = None
    ) -> None:
        """Delete vectors by id and/or by filter."""

    def describe_index(self, name: str) -> IndexStats:
        """Dimension, metric and vector count of an index."""

    def list_indexes(self) -> list[str]:
        """Names of every index."""

    def delete_index(self, name: str) -> None:
        """Delete an index and all its vectors."""


class AsyncTwins:
    """The async twins of a vector store's methods: each runs the blocking call in a worker
    thread."""


    async def acreate_index(self: VectorStore, name: str, dimension: int, metric: str = "cosine") -> None:
        """The async twin of ``create_index``, with the same parameters."""
        return await asyncio.to_thread(self.create_index, name, dimension, metric)

    async def aupsert(self: VectorStore, name: str, vectors: Any, **kwargs: Any) -> list[str]:
        """The async twin of ``upsert``, with the same parameters."""
        return await asyncio.to_thread(functools.partial(self.upsert, name, vectors, **kwargs))

    async def aquery(self: VectorStore, name: str, vector: Any, **kwargs: Any) -> list[QueryResult]:
        """The async twin of ``query``, with the same parameters."""
        return await asyncio.to_thread(functools.partial(self.query, name, vector, **kwargs))

    async def adelete_vectors(self: VectorStore, name: str, **kwargs: Any) -> None:
        """The async twin of ``delete_vectors``, with the same parameters."""
        return await asyncio.to_thread(functools.partial(self.delete_vectors, name, **kwargs))

    async def adescribe_index(self: VectorStore, name: str) -> IndexStats:
        """The async twin of ``describe_index``, with the same parameters."""
        return await asyncio.to_thread(self.describe_index, name)

    async def alist_indexes(self: VectorStore) -> list[str]:
        """The async twin of ``list_indexes``, with the same parameters."""
        return await asyncio.to_thread(self.list_indexes)

    async def adelete_index(self: VectorStore, name: str) -> None:
        """The async twin of ``delete_index``, with the same parameters."""
        return await asyncio.to_thread(self.delete_index, name)
