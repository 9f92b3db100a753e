"""Embedding models side by side on LoCoMo: vector and hybrid evidence recall at top 5 and 10
(all ten conversations, message_range 0, plain top-K), next to each model's speed.

    python benches/compare_models.py locomo10.json [MODEL_DIR ...] [--texts 256]
        [--out benches/results/locomo-models.md]

MiniLM (the default) is always included; each MODEL_DIR is a directory ``LocalEmbedder``
loads. Recall comes from ``tune_fusion``'s evaluation over embeddings cached on disk (so a
model is embedded once); speed is measured fresh on the same LoCoMo turns for every model in
this run, one thread (``workers=1``) and on every core (the default), with the rounds of all
models interleaved.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from tune_fusion import DiskCachedEmbedder, recall_at  # noqa: E402

from threadrecall import Memory  # noqa: E402
from threadrecall.embedders import LocalEmbedder  # noqa: E402
from threadrecall.evaluation import locomo  # noqa: E402


def make(model: str | None, **kwargs) -> LocalEmbedder:
    return LocalEmbedder(model, **kwargs) if model else LocalEmbedder(**kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", type=Path)
    parser.add_argument("models", nargs="*")
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    data = locomo.load(args.dataset)
    models = [None, *args.models]
    turns = [f"{t.speaker}: {t.text}" for c in data for s in c.sessions for t in s.turns][: args.texts]
    cores = os.cpu_count() or 1

    speed: dict[tuple, list[float]] = {}
    embedders = {(m, w): make(m, workers=w) for m in models for w in (1, cores)}
    for embedder in embedders.values():
        embedder.embed(turns[:16])  # load outside the timing
    for _ in range(args.rounds):
        for key, embedder in embedders.items():
            started = time.perf_counter()
            embedder.embed(turns)
            speed.setdefault(key, []).append(len(turns) / (time.perf_counter() - started))

    rows = []
    for model in models:
        inner = make(model)
        cache = DiskCachedEmbedder(inner, Path(f"/tmp/embeddings-{inner.model_id}.npz"))
        memory = Memory(embedder=cache, options={"last_messages": False, "semantic_recall": True})
        for c in data:
            locomo.store(memory, c)
        cache.save()
        recall = {mode: recall_at(memory, data, mode) for mode in ("vector", "hybrid")}
        rows.append((inner.model_id, inner.dimension, recall,
                     statistics.median(speed[(model, 1)]), statistics.median(speed[(model, cores)])))
        memory.close()

    lines = [f"# Embedding models on LoCoMo (all ten conversations, message_range 0; speed on "
             f"{len(turns)} turns, medians of {args.rounds} interleaved rounds, {cores} shared cores)", "",
             "| model | dim | vector @5 | vector @10 | hybrid @5 | hybrid @10 | sentences/s, 1 thread "
             f"| sentences/s, {cores} workers |", "|---|---|---|---|---|---|---|---|"]
    for model_id, dim, recall, one, many in rows:
        lines.append(f"| {model_id} | {dim} | {recall['vector'][5]:.1f} | {recall['vector'][10]:.1f} | "
                     f"**{recall['hybrid'][5]:.1f}** | **{recall['hybrid'][10]:.1f}** | {one:.0f} | {many:.0f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
