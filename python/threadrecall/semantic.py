"""The message vector index: what is embedded, under which ids and metadata, and how it is searched.

One write path serves ``Memory`` and the ``SemanticRecall`` processor. A message's searchable
text (``Message.search_text``: its text, after ``"<speaker>: "`` when ``metadata["speaker"]``
names who said it) is cut into chunks of at most ``CHUNK_CHARS`` characters; chunk ``k`` of message ``m`` is
stored under the vector id ``m#k`` with metadata naming the message, its thread, resource, role,
creation time, the message's own metadata and its thread's (so a vector filter can select by
either; a key in both takes the message's value). Vectors are written through the vector store
in the caller's transaction, so messages and their vectors land together or not at all; when a
thread's or a message's metadata changes, its vectors' metadata is rewritten in the same
transaction (``MessageIndex.retag``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .embedders import CachedEmbedder, shared_cache
from .errors import ConfigurationError, DimensionMismatchError
from .types import Message, Thread

__all__ = ["CHUNK_CHARS", "Embedded", "Hit", "MessageIndex", "chunk_text", "index_name_for"]

CHUNK_CHARS = 4096 * 4  # 4,096 tokens of about 4 characters
RESERVED_KEYS = ("message_id", "thread_id", "resource_id", "role", "created_at")
_WHITESPACE = re.compile(r"\s+")


def chunk_text(text: str, limit: int = CHUNK_CHARS) -> list[str]:
    """Words joined greedily with single spaces into chunks of at most ``limit`` characters.

    >>> chunk_text("a  b\\n c", limit=3)
    ['a b', 'c']
    """
    joined = " ".join(text.split())  # the usual case: one chunk, the words single-spaced
    if len(joined) <= limit:
        return [joined] if joined else []
    chunks: list[str] = []
    current = ""
    for word in _WHITESPACE.split(text.strip()):
        while len(word) > limit:
            if current:
                chunks.append(current)
                current = ""
            chunks.append(word[:limit])
            word = word[limit:]
        if not word:
            continue
        if current and len(current) + 1 + len(word) <= limit:
            current += " " + word
        else:
            if current:
                chunks.append(current)
            current = word
    if current:
        chunks.append(current)
    return chunks


INDEX_PREFIX = "mastra_memory_"
# Message indexes named by the dimension alone, as earlier versions did.
_LEGACY_PREFIX = "memory_messages"
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_]")


def index_name_for(model_id: str) -> str:
    """The default message index of an embedder: ``mastra_memory_<model id>``, every character
    outside ``[A-Za-z0-9_]`` replaced by ``_``, cut to 63 characters. Vectors of two models
    never share an index.

    >>> index_name_for("text-embedding-3-small")
    'mastra_memory_text_embedding_3_small'
    """
    return (INDEX_PREFIX + _NOT_IN_NAME.sub("_", model_id))[:63]


def _is_message_index(name: str) -> bool:
    return name.startswith(INDEX_PREFIX) or name.startswith(_LEGACY_PREFIX)


@dataclass(frozen=True)
class Embedded:
    """Chunk vectors of some messages: ``message_ids[i]`` owns ``vectors[i]``."""

    message_ids: list[str]
    vectors: np.ndarray


@dataclass(frozen=True)
class Hit:
    message_id: str
    score: float


class MessageIndex:
    """Messages' vectors in a vector store: written, removed and searched by message."""

    def __init__(self, vector: Any, embedder: Any, *, index_name: str | None = None) -> None:
        self.vector = vector
        self.embedder: CachedEmbedder = shared_cache(embedder)
        self.name = index_name or index_name_for(self.embedder.model_id)
        self._named = index_name is not None
        self._ready = False
        self._lock = threading.Lock()

    def ensure(self) -> None:
        """Create the index once (an existing one of another dimension is an error)."""
        if not self._ready:
            with self._lock:
                if not self._ready:
                    self._check_no_other_model()
                    self.vector.create_index(self.name, self.embedder.dimension, "cosine")
                    self._ready = True

    def _check_no_other_model(self) -> None:
        """Refuse to start a default message index beside the one of another embedder: the
        messages embedded there would silently drop out of recall."""
        if self._named:
            return
        names = self.vector.list_indexes()
        if self.name in names:
            return
        others = [n for n in names if _is_message_index(n)]
        if not others:
            return
        other, model = others[0], self.embedder.model_id
        found = self.vector.describe_index(other).dimension
        how = (f"to re-embed them with {model}, delete that index (vector.delete_index({other!r})) "
               "and save the messages again; to go on with the embedder that wrote it, pass "
               f"semantic_recall={{'index_name': {other!r}}}")
        if found != self.embedder.dimension:
            raise DimensionMismatchError(
                f"messages in this database are embedded with {found} dimensions (index {other}) "
                f"but the embedder {model} gives {self.embedder.dimension}; {how}")
        raise ConfigurationError(
            f"messages in this database are embedded by another model (index {other}), not by "
            f"{model}, and vectors of two models cannot be compared; {how}")

    def embed_query(self, text: str) -> np.ndarray:
        """The query's chunk vectors, embedded as a search query (``embed_query`` of an
        asymmetric embedder, ``embed`` otherwise)."""
        return self.embedder.embed_query(chunk_text(text) or [""])

    def prepare(self, messages: Sequence[Message]) -> Embedded:
        """Embed the text of ``messages``: the slow part, done before any transaction opens."""
        owners: list[str] = []
        chunks: list[str] = []
        for m in messages:
            pieces = chunk_text(m.search_text)
            owners.extend([m.id] * len(pieces))
            chunks.extend(pieces)
        if not chunks:
            return Embedded([], np.zeros((0, self.embedder.dimension), np.float32))
        return Embedded(owners, self.embedder.embed(chunks))

    def write(self, embedded: Embedded, messages: Mapping[str, Message],
              threads: Mapping[str, Thread], replaced: Iterable[Message] = ()) -> None:
        """Store prepared vectors of ``messages`` (by id), first dropping those of the
        ``replaced`` (previously stored) versions."""
        self.ensure()
        self.remove(replaced)
        if not embedded.message_ids:
            return
        ids, metadata = [], []
        chunk_of: dict[str, int] = {}
        for mid in embedded.message_ids:
            k = chunk_of[mid] = chunk_of.get(mid, -1) + 1
            m = messages[mid]
            ids.append(f"{mid}#{k}")
            metadata.append(vector_metadata(m, threads.get(m.thread_id)))
        self.vector.upsert(self.name, embedded.vectors, ids=ids, metadata=metadata)

    def retag(self, messages: Sequence[Message], threads: Mapping[str, Thread]) -> None:
        """Rewrite the metadata of these stored messages' vectors (after a change to their
        own or their thread's metadata), keeping the vectors when the store can (its
        ``update_metadata``); other stores get the messages embedded again."""
        if not messages:
            return
        self.ensure()
        update = getattr(self.vector, "update_metadata", None)
        if update is None:
            self.write(self.prepare(messages), {m.id: m for m in messages}, threads, messages)
            return
        ids, metadata = [], []
        for m in messages:
            record = vector_metadata(m, threads.get(m.thread_id))
            for vid in vector_ids(m):
                ids.append(vid)
                metadata.append(record)
        update(self.name, ids, metadata)

    def remove(self, messages: Iterable[Message]) -> None:
        """Drop the vectors of these stored messages (by id: no scan of the index)."""
        ids = [vid for m in messages for vid in vector_ids(m)]
        if ids:
            self.ensure()
            self.vector.delete_vectors(self.name, ids=ids)

    def search(self, query: str, *, top_k: int, filter: Mapping[str, Any],
               threshold: float | None = None) -> list[Hit]:
        """Top-``top_k`` per query chunk, kept when ``score >= threshold``."""
        return self._search(query, top_k, filter, threshold, deferred=False)[0]

    def search_deferred(self, query: str, *, top_k: int, filter: Mapping[str, Any],
                        threshold: float | None = None) -> tuple[list[Hit], Any]:
        """``search`` on a store that can leave its freshness check to the caller's next
        statement (``HnswVectorStore.search_ids_deferred``): ``(hits, freshness)``. When
        ``freshness`` is not ``None``, the hits stand only if it holds once that statement
        ran; else ``search`` gives the answer. ``None``: the hits are ``search``'s own.

        >>> from threadrecall.embedders import HashEmbedder
        >>> from threadrecall.vector import HnswVectorStore
        >>> index = MessageIndex(HnswVectorStore(), HashEmbedder(dim=8))
        >>> index.search_deferred("hello", top_k=1, filter={})
        ([], None)
        """
        return self._search(query, top_k, filter, threshold, deferred=True)

    def catch_up(self, freshness: Any) -> bool:
        """After a ``freshness`` check that did not hold: apply the changes it read to the
        store's index. ``True``: a search now (``search_deferred``, its new check not needed)
        is as current as the read that ran the check; ``False``: use ``search``."""
        catch_up = getattr(self.vector, "catch_up", None)
        return catch_up is not None and catch_up(self.name, freshness)

    def _search(self, query: str, top_k: int, filter: Mapping[str, Any],
                threshold: float | None, deferred: bool) -> tuple[list[Hit], Any]:
        self.ensure()
        # Only a cache of rows other processes write has a check worth deferring.
        deferring = deferred and getattr(self.vector, "shared", False) is True
        later = getattr(self.vector, "search_ids_deferred", None) if deferring else None
        search = getattr(self.vector, "search_ids", None)  # a store's metadata-free fast path
        hits: list[Hit] = []
        freshness = None
        for vector in self.embed_query(query):
            if later is not None:  # the first check taken covers the chunks searched after it
                pairs, check = later(self.name, vector, top_k=top_k, filter=filter)
                freshness = freshness or check
            elif search is not None:
                pairs = search(self.name, vector, top_k=top_k, filter=filter)
            else:
                pairs = [(r.id, r.score) for r in self.vector.query(self.name, vector, top_k=top_k, filter=filter)]
            hits.extend(Hit(vid.rsplit("#", 1)[0], score) for vid, score in pairs
                        if threshold is None or score >= threshold)
        return hits, freshness


def vector_ids(message: Message) -> list[str]:
    """The ids of a message's chunk vectors: ``<message id>#<chunk>``."""
    return [f"{message.id}#{k}" for k in range(len(chunk_text(message.search_text)))]


def vector_metadata(message: Message, thread: Thread | None) -> dict[str, Any]:
    """What a vector filter sees of a message: its thread's metadata, then its own (which wins
    on a shared key), then the reserved fields (which win over both)."""
    base = {**(thread.metadata if thread else {}), **message.metadata}
    return {
        **{k: v for k, v in base.items() if k not in RESERVED_KEYS},
        "message_id": message.id,
        "thread_id": message.thread_id,
        "resource_id": message.resource_id or "",
        "role": message.role,
        "created_at": message.created_at.isoformat(),
    }
