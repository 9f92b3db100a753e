"""The vector store protocol: what Memory needs from any vector backend."""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from ..types import IndexStats, QueryResult

__all__ = ["VectorStore"]


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
