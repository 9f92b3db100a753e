"""Synthetic vector workloads for the vector benchmarks: seeded Gaussian mixtures,
L2-normalised, with exact top-k ground truth by numpy and recall@k against it."""

from __future__ import annotations

from typing import Sequence

import numpy as np

K = 10
SEED = 20240611


def mixture(rng: np.random.Generator, n: int, centres: np.ndarray, spread: float = 0.5) -> np.ndarray:
    """``n`` points around randomly chosen ``centres`` (Gaussian noise of scale ``spread``),
    L2-normalised, float32."""
    which = rng.integers(0, len(centres), n)
    x = centres[which] + rng.standard_normal((n, centres.shape[1]), dtype=np.float32) * spread
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


def exact_top_k(data: np.ndarray, queries: np.ndarray, k: int) -> list[list[int]]:
    """The ids of the ``k`` rows of ``data`` with the largest inner product, per query, best first."""
    out: list[list[int]] = []
    kk = min(k, data.shape[0])
    for start in range(0, len(queries), 100):
        sims = queries[start:start + 100] @ data.T
        part = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
        order = np.take_along_axis(sims, part, axis=1).argsort(axis=1)[:, ::-1]
        out.extend(np.take_along_axis(part, order, axis=1).tolist())
    return out


def recall(found: Sequence[Sequence[int]], truth: Sequence[Sequence[int]]) -> float:
    """The share of the true neighbours found, over all queries (rows may hold fewer than k)."""
    truth = truth.tolist() if isinstance(truth, np.ndarray) else truth
    hits = sum(len(set(f) & set(t)) for f, t in zip(found, truth))
    return hits / max(1, sum(len(t) for t in truth))
