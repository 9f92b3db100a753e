"""HashEmbedder: shape, determinism, normalisation and similarity ordering."""

import asyncio
import subprocess
import sys

import numpy as np
import pytest
from threadrecall.embedders import Embedder, HashEmbedder
from threadrecall.errors import InvalidArgumentError


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_satisfies_the_protocol():
    embedder = HashEmbedder()
    assert isinstance(embedder, Embedder)
    assert embedder.dimension == 384
    assert embedder.model_id == "hash-v1-384"
    assert HashEmbedder(dim=32, seed=7).model_id == "hash-v1-32-seed7"


@pytest.mark.parametrize("dim", [1, 8, 384, 1536])
def test_shape_dtype_and_unit_norm(dim):
    texts = [
        "hello world",
        "",
        "   ",
        "¿Qué tal? 你好世界",
        "a" * 5000,
        "x",
        "lone \ud800 surrogate",
    ]
    vectors = HashEmbedder(dim=dim).embed(texts)
    assert vectors.shape == (len(texts), dim)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_empty_list_gives_zero_rows():
    vectors = HashEmbedder(dim=16).embed([])
    assert vectors.shape == (0, 16)
    assert vectors.dtype == np.float32


def test_deterministic_and_independent_of_batch_composition():
    texts = [f"message {i} about topic {i % 7}" for i in range(3000)]
    embedder = HashEmbedder()
    whole = embedder.embed(texts)
    again = HashEmbedder().embed(texts)
    np.testing.assert_array_equal(whole, again)
    one_by_one = np.vstack([embedder.embed([t]) for t in texts[:50]])
    np.testing.assert_allclose(one_by_one, whole[:50], atol=1e-7)
    reversed_batch = embedder.embed(texts[::-1])[::-1]
    np.testing.assert_allclose(reversed_batch, whole, atol=1e-7)


def test_stable_across_processes():
    """The vectors never depend on Python's per-process string hashing."""
    code = (
        "from threadrecall.embedders import HashEmbedder;"
        "print(HashEmbedder(dim=16).embed(['stable vectors please']).tobytes().hex())"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(seed), "PATH": ""},
        ).stdout
        for seed in (1, 2)
    }
    assert len(outputs) == 1
    assert (
        outputs.pop().strip()
        == HashEmbedder(dim=16).embed(["stable vectors please"]).tobytes().hex()
    )


def test_case_insensitive():
    embedder = HashEmbedder()
    np.testing.assert_array_equal(embedder.embed(["Hello World"]), embedder.embed(["hello world"]))


def test_seed_changes_the_vectors():
    a = HashEmbedder(seed=0).embed(["some text here"])
    b = HashEmbedder(seed=1).embed(["some text here"])
    assert not np.allclose(a, b)


def test_similarity_ordering():
    embedder = HashEmbedder()
    anchor, near, partial, far = embedder.embed(
        [
            "the cat sat on the mat by the door",
            "the cat sat on the mat near the door",
            "the cat slept by the window",
            "quarterly revenue grew in europe",
        ]
    )
    assert cosine(anchor, near) > cosine(anchor, partial) > cosine(anchor, far)
    assert abs(cosine(anchor, far)) < 0.2


def test_word_order_matters_through_bigrams():
    embedder = HashEmbedder()
    a, same, swapped = embedder.embed(["new york city", "new york city", "city york new"])
    assert cosine(a, same) == pytest.approx(1.0)
    assert cosine(a, swapped) < 0.99


def test_shared_word_stems_are_similar():
    embedder = HashEmbedder()
    cats, cat, dogs = embedder.embed(["cats", "cat", "dogs"])
    assert cosine(cats, cat) > cosine(cats, dogs)


@pytest.mark.parametrize("dim", [0, -3, 2.5, True, "384"])
def test_bad_dimension(dim):
    with pytest.raises(InvalidArgumentError):
        HashEmbedder(dim=dim)


@pytest.mark.parametrize("texts", ["a single string", [1, 2], None, ["ok", None]])
def test_bad_texts(texts):
    with pytest.raises(InvalidArgumentError):
        HashEmbedder().embed(texts)


def test_aembed_matches_embed():
    embedder = HashEmbedder(dim=32)
    texts = ["one", "two words", ""]
    np.testing.assert_array_equal(asyncio.run(embedder.aembed(texts)), embedder.embed(texts))


@pytest.mark.parametrize("texts", [[""], ["", ""], ["!!! ..."]])
def test_texts_without_words_get_the_same_unit_vector(texts):
    vectors = HashEmbedder(dim=8).embed(texts)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0)
    np.testing.assert_array_equal(vectors, np.repeat(vectors[:1], len(texts), axis=0))
