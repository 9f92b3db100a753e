"""Vector and hybrid evidence recall on LoCoMo for one embedder, and a search over hybrid's
fusion constants: chosen on some conversations, checked on the others.

    python benches/tune_fusion.py locomo10.json [--model DIR] [--train 0-4] [--check 5-9]
        [--cache /tmp/embeddings-<model>.npz] [--grid] [--json out.json]

Every turn and question is stored and asked through ``Memory`` as ``threadrecall eval locomo``
does (resource scope, message_range 0, the speaker in the indexed text), and ranked with
``hybrid.ranked_ids``, so a question's top 5 is the head of its top 10. Embeddings are kept in
an ``.npz`` file (texts as documents and as queries apart), so each model embeds its texts once
however often the fusion is re-tuned. ``--grid`` tries each combination of the constants in
``GRID`` on the training conversations and reports the best (by recall @5 + @10) on both
splits, with today's constants beside it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from threadrecall import Memory, hybrid
from threadrecall.evaluation import locomo

GRID = {
    "LEXICAL_WEIGHT": (0.75, 1.0, 1.25, 1.5, 2.0),
    "RRF_K": (3, 5, 10),
    "SIDE_NEIGHBOUR_WEIGHT": (0.2, 0.3, 0.4),
    "NEIGHBOUR_WEIGHT": (0.4, 0.5, 0.6),
}


class DiskCachedEmbedder:
    """Answers from an ``.npz`` of earlier vectors, embeds only new texts, saves on ``save``."""

    def __init__(self, inner, path: Path) -> None:
        self.inner, self.path = inner, path
        self.model_id, self.dimension = inner.model_id, inner.dimension
        self.vectors: dict[tuple[str, str], np.ndarray] = {}
        self.embedded = 0
        self.seconds = 0.0
        if path.is_file():
            data = np.load(path, allow_pickle=False)
            for role in ("document", "query"):
                if f"{role}_texts" in data:
                    self.vectors.update(((role, t), v) for t, v in zip(data[f"{role}_texts"].tolist(),
                                                                      data[f"{role}_vectors"]))

    def _get(self, role: str, texts: list[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if (role, t) not in self.vectors))
        if missing:
            started = time.perf_counter()
            embed = self.inner.embed_query if role == "query" else self.inner.embed
            fresh = embed(missing)
            self.seconds += time.perf_counter() - started
            self.embedded += len(missing)
            self.vectors.update(((role, t), v) for t, v in zip(missing, fresh))
        return np.stack([self.vectors[(role, t)] for t in texts]).astype(np.float32)

    def embed(self, texts):
        return self._get("document", list(texts))

    def embed_query(self, texts):
        return self._get("query", list(texts))

    async def aembed(self, texts):
        return self.embed(texts)

    def save(self) -> None:
        arrays = {}
        for role in ("document", "query"):
            keys = [t for r, t in self.vectors if r == role]
            if keys:
                arrays[f"{role}_texts"] = np.array(keys)
                arrays[f"{role}_vectors"] = np.stack([self.vectors[(role, t)] for t in keys])
        np.savez(self.path, **arrays)


@dataclass
class Setting:
    mode: str
    top_k: int = 10
    filter: object = None
    threshold: object = None
    lexical_weight: object = None


def split(text: str) -> range:
    start, _, end = text.partition("-")
    return range(int(start), int(end or start) + 1)


def candidates(memory: Memory, conversations) -> list:
    """Per question with evidence: its scope, evidence, and the lexical and vector rankings
    (which the fusion constants do not change), computed once."""
    out = []
    depth = hybrid.CANDIDATES
    for c in conversations:
        scope = {"resource_id": c.sample_id}
        for q in c.questions:
            if q.evidence:
                lexical = hybrid.lexical_scores(memory.storage, q.text, depth, scope)
                vector = hybrid._vector_scores(memory.index, q.text, depth, scope, None, None)
                out.append((c.sample_id, set(q.evidence), list(lexical.items()), list(vector.items())))
    return out


def fused_recall(memory: Memory, asked: list) -> dict[int, float]:
    """Hybrid recall at 5 and 10 from precomputed rankings, under hybrid's current constants
    (the same core call as ``hybrid.ranked_ids``)."""
    totals = {5: 0.0, 10: 0.0}
    for resource_id, wanted, lexical, vector in asked:
        fused = memory.storage.timeline.fuse(lexical, vector, hybrid.SIDE_NEIGHBOUR_WEIGHT,
                                             hybrid.LEXICAL_WEIGHT, hybrid.RRF_K,
                                             hybrid.NEIGHBOUR_WEIGHT, resource_id, None, 10)
        ids = [i for i, _ in fused]
        for k in totals:
            totals[k] += len(wanted.intersection(ids[:k])) / len(wanted)
    return {k: 100 * v / len(asked) for k, v in totals.items()}


def recall_at(memory: Memory, conversations, mode: str) -> dict[int, float]:
    """Mean evidence recall over the questions at top 5 and 10 (message_range 0)."""
    totals, count = {5: 0.0, 10: 0.0}, 0
    for c in conversations:
        for q in c.questions:
            if not q.evidence:
                continue
            ids = hybrid.ranked_ids(Setting(mode), memory.storage, memory.index, q.text,
                                    {"resource_id": c.sample_id})
            wanted = set(q.evidence)
            for k in totals:
                totals[k] += len(wanted.intersection(ids[:k])) / len(wanted)
            count += 1
    return {k: 100 * v / count for k, v in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--model", help="a model directory or package (default: MiniLM)")
    parser.add_argument("--query-prompt")
    parser.add_argument("--document-prompt")
    parser.add_argument("--train", default="0-4")
    parser.add_argument("--check", default="5-9")
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--grid", action="store_true")
    parser.add_argument("--grid-values", type=json.loads, default={},
                        help='JSON replacing some of GRID, e.g. \'{"RRF_K": [4, 5, 6]}\'')
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from threadrecall.embedders import LocalEmbedder

    prompts = {"query_prompt": args.query_prompt, "document_prompt": args.document_prompt}
    inner = LocalEmbedder(args.model, **prompts) if args.model else LocalEmbedder(**prompts)
    tag = "-prompts" if inner.spec.query_prompt or inner.spec.document_prompt else ""
    cache = DiskCachedEmbedder(inner, args.cache or Path(f"/tmp/embeddings-{inner.model_id}{tag}.npz"))
    data = locomo.load(args.dataset)
    train = [data[i] for i in split(args.train)]
    check = [data[i] for i in split(args.check)]
    memory = Memory(embedder=cache, options={"last_messages": False, "semantic_recall": True})
    for c in [*train, *check]:
        locomo.store(memory, c)
    report: dict = {"model": inner.model_id, "train": args.train, "check": args.check}
    for c in [*train, *check]:  # embed every question once, as a query
        cache.embed_query([q.text for q in c.questions if q.evidence])
    cache.save()
    if cache.embedded:
        report["sentences_per_s"] = round(cache.embedded / cache.seconds, 1)
    for name, convs in (("train", train), ("check", check), ("all", [*train, *check])):
        for mode in ("vector", "hybrid"):
            report[f"{mode}_{name}"] = {k: round(v, 1) for k, v in recall_at(memory, convs, mode).items()}
    print(json.dumps(report), flush=True)
    GRID.update({name: tuple(values) for name, values in args.grid_values.items()})
    if args.grid:
        current = {name: getattr(hybrid, name) for name in GRID}
        asked = candidates(memory, train)
        assert abs(fused_recall(memory, asked)[5] - report["hybrid_train"][5]) < 0.05
        best = None
        for values in itertools.product(*GRID.values()):
            for name, value in zip(GRID, values):
                setattr(hybrid, name, value)
            r = fused_recall(memory, asked)
            if best is None or r[5] + r[10] > best[0][5] + best[0][10]:
                best = (r, dict(zip(GRID, values)))
                print("better on train:", {k: round(v, 1) for k, v in r.items()}, best[1], flush=True)
        for name, value in best[1].items():
            setattr(hybrid, name, value)
        report["best"] = {"constants": best[1],
                          **{f"hybrid_{n}": {k: round(v, 1) for k, v in recall_at(memory, cs, "hybrid").items()}
                             for n, cs in (("train", train), ("check", check), ("all", [*train, *check]))}}
        report["current_constants"] = current
        for name, value in current.items():
            setattr(hybrid, name, value)
        print(json.dumps(report["best"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
