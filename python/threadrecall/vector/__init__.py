"""Vector stores: the protocol and the default Rust HNSW store over DuckDB."""

from .base import VectorStore
from .hnsw import HnswVectorStore

__all__ = ["HnswVectorStore", "VectorStore"]
