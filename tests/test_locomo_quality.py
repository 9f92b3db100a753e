"""Retrieval quality on two LoCoMo conversations, with the real local embedding model.

The floors sit a little below what this two-conversation run measures (hybrid 69 / 79 %,
lexical 67 / 78 %, vector 36 / 44 % evidence recall at top_k 5 / 10, message_range 0; the ten-conversation
figures are in the README), so a change that makes recall clearly worse fails here.
Skipped when the dataset (CC BY-NC 4.0, never in this repository) or onnxruntime is absent;
``LOCOMO_PATH`` names the file, else ``shared/datasets/locomo10.json`` is looked for beside
the repository and its parents.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from threadrecall.evaluation import locomo


def dataset_path() -> Path | None:
    if os.environ.get("LOCOMO_PATH"):
        return Path(os.environ["LOCOMO_PATH"])
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "datasets" / "locomo10.json"
        if candidate.exists():
            return candidate
    return None


PATH = dataset_path()
pytestmark = [
    pytest.mark.skipif(PATH is None or not PATH.exists(), reason="LoCoMo dataset not found"),
    pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime not installed"),
]

FLOORS = {  # (mode, top_k): minimum overall evidence recall, message_range 0
    ("vector", 5): 0.32,
    ("vector", 10): 0.40,
    ("lexical", 5): 0.64,
    ("lexical", 10): 0.75,
    ("hybrid", 5): 0.66,
    ("hybrid", 10): 0.76,
}


@pytest.fixture(scope="module")
def report():
    return locomo.run(PATH, conversations=2, modes=("vector", "lexical", "hybrid"), ks=(5, 10), ranges=(0,),
                      progress=False)


def test_two_conversations_are_stored_whole(report):
    assert report["conversations"] == ["conv-26", "conv-30"]
    assert report["turns"] == 419 + 369


@pytest.mark.parametrize(("mode", "top_k"), sorted(FLOORS))
def test_evidence_recall_stays_above_its_floor(report, mode, top_k):
    row = next(r for r in report["results"] if r["mode"] == mode and r["top_k"] == top_k)
    assert row["avg_returned"] == pytest.approx(top_k, abs=0.01)
    assert row["overall"] >= FLOORS[mode, top_k], row
