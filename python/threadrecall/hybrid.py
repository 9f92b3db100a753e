"""Which messages a semantic recall returns, by mode: vector, lexical (BM25) or hybrid.

``vector`` ranks by embedding similarity (the message index); ``lexical`` by BM25 over the
messages' search text (the storage's ``LexicalIndex``, with the thread or resource scope pushed
into the scoring); ``hybrid`` fuses the two rankings' top ``max(top_k, CANDIDATES)`` by
reciprocal rank, ``sum(1 / (RRF_K + rank))``, and keeps the best ``top_k``. The similarity
``threshold`` applies to vector scores only (BM25 scores have no fixed scale). A
``semantic_recall.filter`` (over thread metadata and the message fields) applies in every mode.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from . import _core
from .semantic import MessageIndex, vector_metadata
from .storage.duckdb import DuckDBStorage

__all__ = ["CANDIDATES", "RRF_K", "lexical_ids", "ranked_ids", "reciprocal_rank_fusion"]

RRF_K = 60
CANDIDATES = 50  # each ranking's depth before fusion


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Ids ordered by ``sum(1 / (k + rank))`` over the rankings (rank from 1); ties keep the
    order of first appearance.

    >>> reciprocal_rank_fusion([["a", "b", "c"], ["c", "a"]])
    ['a', 'c', 'b']
    """
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda i: -scores[i])


def lexical_ids(storage: DuckDBStorage, query: str, top_k: int, scope: Mapping[str, str],
                filter: Mapping[str, Any] | None = None) -> list[str]:
    """The ``top_k`` best BM25 matches in the scope (``{"thread_id": t}`` or
    ``{"resource_id": r}``) that pass ``filter``, best first."""
    index = storage.lexical()
    k = top_k
    while True:
        hits = [mid for mid, _ in index.search(query, k, **scope)]
        passing = hits if filter is None else _passing(storage, hits, filter)
        if len(passing) >= top_k or len(hits) < k:
            return passing[:top_k]
        k *= 4


def ranked_ids(semantic: Any, storage: DuckDBStorage, index: MessageIndex | None, query: str,
               scope: Mapping[str, str]) -> list[str]:
    """The ids of the best ``semantic.top_k`` messages for ``query`` under ``semantic.mode``."""
    flt = dict(semantic.filter) if semantic.filter else None
    top_k = semantic.top_k
    if semantic.mode == "lexical":
        return lexical_ids(storage, query, top_k, scope, flt)
    depth = top_k if semantic.mode == "vector" else max(top_k, CANDIDATES)
    where = {"$and": [dict(scope), flt]} if flt else dict(scope)
    assert index is not None
    hits = index.search(query, top_k=depth, filter=where, threshold=semantic.threshold)
    vector = list(dict.fromkeys(h.message_id for h in hits))
    if semantic.mode == "vector":
        return vector
    lexical = lexical_ids(storage, query, depth, scope, flt)
    return reciprocal_rank_fusion([vector, lexical])[:top_k]


def _passing(storage: DuckDBStorage, ids: Iterable[str], filter: Mapping[str, Any]) -> list[str]:
    messages = [m for i in ids if (m := storage.get_message(i)) is not None]
    threads = storage.get_threads(m.thread_id for m in messages)
    records = [vector_metadata(m, threads.get(m.thread_id)) for m in messages]
    keep = _core.matches_vector_filter(filter, records)
    return [m.id for m, ok in zip(messages, keep) if ok]
