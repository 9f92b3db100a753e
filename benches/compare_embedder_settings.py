"""LocalEmbedder's speed settings side by side, in one run: onnxruntime's graph optimisation
level and the batch size (with the largest difference between their vectors), and how a bulk
import spreads its batches over the cores (one thread; threads sharing one session; one
session per thread; one process per core), plus the latency of embedding a single turn.

    python benches/compare_embedder_settings.py [locomo10.json] [--model DIR] [--texts 1500]
        [--rounds 3] [--out benches/results/embedder-settings.md]

The texts are LoCoMo turns as they are indexed (``"<speaker>: <text>"``) when the dataset is
given, else seeded chat-like messages. Rounds of every variant are interleaved and the median
is reported, so a neighbour's load on a shared machine falls on all of them alike.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

from threadrecall.embedders import LocalEmbedder

sys.path.insert(0, str(Path(__file__).parent))


class WithLevel(LocalEmbedder):
    """A LocalEmbedder whose session uses another graph optimisation level."""

    def __init__(self, *args, level: str = "basic", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.level = level

    def _open_session(self):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = {
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[self.level]
        return ort.InferenceSession(str(self.spec.onnx_path), options, providers=["CPUExecutionProvider"])


def texts_from(path: str | None, count: int) -> list[str]:
    if path:
        from threadrecall.evaluation import locomo

        turns = [f"{t.speaker}: {t.text}" for c in locomo.load(path) for s in c.sessions for t in s.turns]
        return turns[:count]
    from bench_embedders import short_texts

    return short_texts(count)


def sessions_per_thread(model, texts: list[str], workers: int) -> np.ndarray:
    """One LocalEmbedder (one session) per thread, each embedding its share of the texts."""
    embedders = _SESSIONS.setdefault((model, workers), [
        LocalEmbedder(model, workers=1) if model else LocalEmbedder(workers=1) for _ in range(workers)])
    parts: list = [None] * workers
    shares = np.array_split(np.arange(len(texts)), workers)

    def run(i: int) -> None:
        parts[i] = embedders[i].embed([texts[j] for j in shares[i]])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return np.vstack(parts)


_SESSIONS: dict = {}
_PROCESS_EMBEDDER = None


def _process_init(model) -> None:
    global _PROCESS_EMBEDDER
    _PROCESS_EMBEDDER = LocalEmbedder(model, workers=1) if model else LocalEmbedder(workers=1)
    _PROCESS_EMBEDDER.embed(["warm up"])


def _process_embed(texts: list[str]) -> np.ndarray:
    return _PROCESS_EMBEDDER.embed(texts)


def timed(fn, texts):
    started = time.perf_counter()
    out = fn(texts)
    return time.perf_counter() - started, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", nargs="?")
    parser.add_argument("--model")
    parser.add_argument("--texts", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    texts = texts_from(args.dataset, args.texts)
    model = args.model
    make = (lambda **kw: WithLevel(model, **kw)) if model else (lambda **kw: WithLevel(**kw))
    cores = os.cpu_count() or 1

    settings = {
        "optimisation ALL, batch 64 (before)": make(level="all", batch_size=64, workers=1),
        "optimisation ALL, batch 16": make(level="all", batch_size=16, workers=1),
        "optimisation BASIC, batch 64": make(level="basic", batch_size=64, workers=1),
        "optimisation BASIC, batch 16 (default)": make(level="basic", batch_size=16, workers=1),
    }
    pool = multiprocessing.get_context("spawn").Pool(cores, _process_init, (model,))
    shared = make(level="basic", batch_size=16, workers=cores)
    chunks = [texts[i : i + 64] for i in range(0, len(texts), 64)]
    bulk = {
        "1 thread": settings["optimisation BASIC, batch 16 (default)"].embed,
        f"{cores} threads, one shared session (default)": shared.embed,
        f"{cores} threads, a session each": lambda t: sessions_per_thread(model, t, cores),
        f"{cores} processes, a session each": lambda t: np.vstack(pool.map(_process_embed, chunks)),
    }
    for embedder in settings.values():
        embedder.embed(texts[:32])  # load outside the timing
    sessions_per_thread(model, texts[:32], cores)
    shared.embed(texts[:64])

    times: dict[str, list[float]] = {name: [] for name in [*settings, *bulk]}
    outputs: dict[str, np.ndarray] = {}
    for _ in range(args.rounds):
        for name, embedder in settings.items():
            seconds, outputs[name] = timed(embedder.embed, texts)
            times[name].append(seconds)
        for name, fn in bulk.items():
            seconds, outputs[name] = timed(fn, texts)
            times[name].append(seconds)
    single = {"workers=1": make(level="basic", workers=1), f"workers={cores}": shared}
    latency = {}
    for name, embedder in single.items():
        embedder.embed(["warm"])
        samples = []
        for i in range(60):
            started = time.perf_counter()
            embedder.embed([f"{texts[i]} ({i})"])
            samples.append(time.perf_counter() - started)
        latency[name] = statistics.median(samples) * 1e3
    pool.close()

    reference = outputs["optimisation ALL, batch 64 (before)"]
    base = statistics.median(times["optimisation ALL, batch 64 (before)"])
    lines = [f"# LocalEmbedder settings ({settings['optimisation ALL, batch 64 (before)'].model_id}, "
             f"{len(texts)} texts, {args.rounds} interleaved rounds, medians, {cores} cores, "
             f"load average at end {os.getloadavg()[0]:.1f})", "",
             "| variant | sentences/s | speed vs before | max abs difference vs before |",
             "|---|---|---|---|"]
    for name in times:
        median = statistics.median(times[name])
        diff = float(np.abs(outputs[name] - reference).max())
        lines.append(f"| {name} | {len(texts) / median:,.0f} | {base / median:.2f}x | {diff:.1e} |")
    lines += ["", "| single-turn save | median ms per embed([text]) |", "|---|---|"]
    lines += [f"| {name} | {ms:.2f} |" for name, ms in latency.items()]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
