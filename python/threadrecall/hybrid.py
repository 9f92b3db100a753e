"""Which messages a semantic recall returns, by mode: vector, lexical (BM25) or hybrid.

- ``vector`` ranks by embedding similarity (the message index), as the reference does.
- ``lexical`` ranks by BM25 over the messages' search text (the storage's ``LexicalIndex``,
  with the thread or resource scope pushed into the scoring; a message is also scored joined
  with the few messages before it in its thread).
- ``hybrid`` takes the vector and lexical top ``CANDIDATES``, lets each candidate gain
  ``SIDE_NEIGHBOUR_WEIGHT`` times its best direct neighbour's score within each ranking, and
  fuses the two rankings by weighted reciprocal rank,
  ``LEXICAL_WEIGHT / (RRF_K + lexical rank) + 1 / (RRF_K + vector rank)``
  (``semantic_recall.lexical_weight`` replaces ``LEXICAL_WEIGHT`` when set).

In the lexical and hybrid modes a message's score then gains ``NEIGHBOUR_WEIGHT`` times the
best score of the messages right before and after it in its thread (a reply is often found by
the words of the turn it answers), and the best ``top_k`` are kept. The smoothing and the
fusion run in the core (``Timeline.smooth``, ``Timeline.fuse``). The similarity
``threshold`` applies to vector scores only (BM25 scores have no fixed scale). A
``semantic_recall.filter`` (over thread metadata and the message fields) applies in every mode.
The constants were chosen on LoCoMo (see ``threadrecall eval locomo``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from . import _core
from .semantic import MessageIndex, vector_metadata
from .storage.base import Storage

R = TypeVar("R")

__all__ = ["CANDIDATES", "LEXICAL_WEIGHT", "NEIGHBOUR_WEIGHT", "RRF_K", "SIDE_NEIGHBOUR_WEIGHT",
           "lexical_scores", "ranked_ids", "ranked_scores", "read_ranked"]

# A small k keeps the fused order close to each ranking's head, where the evidence usually is.
RRF_K = 5
# BM25 finds the turn that answers a question more often than MiniLM does, so it counts more.
LEXICAL_WEIGHT = 1.5
# The final smoothing: an answer is often the turn right after the one that matches.
NEIGHBOUR_WEIGHT = 0.5
# Smoothing within each ranking before fusion, lighter than the final one: it lets a message
# next to a strong match rise in the ranking it is missing from, before ranks are taken.
SIDE_NEIGHBOUR_WEIGHT = 0.3
# Each ranking's depth before smoothing and fusion: deep enough that neighbours of the top
# matches and the other ranking's hits are still scored (200 beat 100; 400 added little).
CANDIDATES = 200


def lexical_scores(storage: Storage, query: str, top_k: int, scope: Mapping[str, str],
                   filter: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The ``top_k`` best BM25 matches in the scope (``{"thread_id": t}`` or
    ``{"resource_id": r}``) that pass ``filter``, best first, with their scores."""
    index = storage.lexical()
    k = top_k
    while True:
        hits = index.search(query, k, **scope)
        passing = set(_passing(storage, [i for i, _ in hits], filter)) if filter else None
        kept = [(i, s) for i, s in hits if passing is None or i in passing]
        if len(kept) >= top_k or len(hits) < k:
            return dict(kept[:top_k])
        k *= 4


def ranked_scores(semantic: Any, storage: Storage, index: MessageIndex | None, query: str,
                  scope: Mapping[str, str]) -> dict[str, float]:
    """The best ``semantic.top_k`` messages for ``query`` under ``semantic.mode``, best first,
    with their scores: the cosine similarity in vector mode, the smoothed BM25 score in lexical
    mode, the fused score in hybrid mode."""
    flt = dict(semantic.filter) if semantic.filter else None
    if semantic.mode == "vector":
        return _vector_scores(index, query, semantic.top_k, scope, flt, semantic.threshold)
    depth = max(semantic.top_k, CANDIDATES)
    resource_id = scope.get("resource_id")
    scores = lexical_scores(storage, query, depth, scope, flt)
    if semantic.mode == "hybrid":
        vector = _vector_scores(index, query, depth, scope, flt, semantic.threshold)
        # Three smoothings reach at most two messages past a candidate.
        entrants = _entrants(storage, [*scores, *vector], resource_id, flt, hops=2) if flt else None
        weight = getattr(semantic, "lexical_weight", None)
        weight = LEXICAL_WEIGHT if weight is None else float(weight)
        fused = storage.replica.timeline.fuse(list(scores.items()), list(vector.items()), SIDE_NEIGHBOUR_WEIGHT,
                                      weight, RRF_K, NEIGHBOUR_WEIGHT, resource_id, entrants,
                                      semantic.top_k)
        return dict(fused)
    smoothed = _with_neighbours(storage, scores, resource_id, flt, NEIGHBOUR_WEIGHT)
    return dict(list(smoothed.items())[:semantic.top_k])


def _ranked_scores_deferred(semantic: Any, storage: Storage, index: MessageIndex | None, query: str,
                           scope: Mapping[str, str]) -> tuple[dict[str, float], Any]:
    """``ranked_scores`` and the freshness check its vector search left to the caller's next
    statement (``MessageIndex.search_deferred``), or ``None`` when nothing was left: only the
    vector mode's search defers."""
    if semantic.mode != "vector":
        return ranked_scores(semantic, storage, index, query, scope), None
    assert index is not None
    hits, freshness = index.search_deferred(query, top_k=semantic.top_k,
                                            filter=_where(scope, semantic.filter),
                                            threshold=semantic.threshold)
    return _best(hits), freshness


def read_ranked(semantic: Any, storage: Storage, index: MessageIndex | None, query: str,
                scope: Mapping[str, str], read: Callable[[dict[str, float], Any], R]) -> tuple[dict[str, float], R]:
    """``ranked_scores`` and ``read(scores, freshness)`` of them. An index that can leave its
    freshness check to the caller's next statement does (``_ranked_scores_deferred``), and
    ``read`` runs it: one round trip when nothing changed. When the check does not hold, the
    changes it brought are applied and the index searched again; the hits are read again
    (``read(scores, None)``) only when they changed, as what was read of the same hits is as
    of that read."""
    scores, freshness = _ranked_scores_deferred(semantic, storage, index, query, scope)
    result = read(scores, freshness)
    if freshness is not None and not freshness.held:
        assert index is not None
        if index.catch_up(freshness):
            found, _ = _ranked_scores_deferred(semantic, storage, index, query, scope)
        else:
            found = ranked_scores(semantic, storage, index, query, scope)
        if found.keys() != scores.keys():
            result = read(found, None)
        scores = found
    return scores, result


def ranked_ids(semantic: Any, storage: Storage, index: MessageIndex | None, query: str,
               scope: Mapping[str, str]) -> list[str]:
    """The ids of ``ranked_scores``, best first."""
    return list(ranked_scores(semantic, storage, index, query, scope))


def _vector_scores(index: MessageIndex | None, query: str, top_k: int, scope: Mapping[str, str],
                   flt: Mapping[str, Any] | None, threshold: float | None) -> dict[str, float]:
    """Each matching message's best chunk similarity, best first."""
    assert index is not None
    return _best(index.search(query, top_k=top_k, filter=_where(scope, flt), threshold=threshold))


def _where(scope: Mapping[str, str], flt: Mapping[str, Any] | None) -> dict[str, Any]:
    """The vector filter of a search: the scope, and the configured filter when there is one."""
    return {"$and": [dict(scope), dict(flt)]} if flt else dict(scope)


def _best(hits: Iterable[Any]) -> dict[str, float]:
    """Each message's first (best) hit's score, in the hits' order."""
    scores: dict[str, float] = {}
    for hit in hits:
        scores.setdefault(hit.message_id, hit.score)
    return scores


def _with_neighbours(storage: Storage, scores: Mapping[str, float], resource_id: str | None,
                     flt: Mapping[str, Any] | None, weight: float) -> dict[str, float]:
    """Each message's score plus ``weight`` times its best direct neighbour's, best first
    (a stable order); the neighbours of scored messages are scored too (when they pass the
    filter)."""
    entrants = _entrants(storage, list(scores), resource_id, flt, hops=1) if flt else None
    return dict(storage.replica.timeline.smooth(list(scores.items()), weight, resource_id, entrants))


def _entrants(storage: Storage, ids: Sequence[str], resource_id: str | None,
              flt: Mapping[str, Any], hops: int) -> list[str]:
    """What smoothing may bring in around ``ids`` (which pass ``flt`` already): ``ids``, and
    the messages up to ``hops`` places from them in their threads that pass ``flt``."""
    candidates = list(dict.fromkeys(ids))
    met, frontier, near = set(candidates), candidates, []
    for _ in range(hops):
        frontier = list(dict.fromkeys(n for pair in storage.replica.timeline.adjacent(frontier, resource_id)
                                      for n in pair if n is not None and n not in met))
        met.update(frontier)
        near += frontier
    return [*candidates, *_passing(storage, near, flt)]


def _passing(storage: Storage, ids: Iterable[str], filter: Mapping[str, Any]) -> list[str]:
    messages = storage.get_messages(ids)
    threads = storage.get_threads(m.thread_id for m in messages)
    records = [vector_metadata(m, threads.get(m.thread_id)) for m in messages]
    keep = _core.matches_vector_filter(filter, records)
    return [m.id for m, ok in zip(messages, keep) if ok]
