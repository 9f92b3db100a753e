"""``HashEmbedder``: deterministic, offline feature hashing, fast enough for tests and demos.

Each text is lower-cased and split into words (runs of ASCII letters and digits, or of
non-ASCII characters). Three feature families are hashed into ``dim`` signed buckets: the
words, the pairs of adjacent words, and the byte trigrams inside words (so ``cat`` and
``cats`` share something). Texts that share words therefore point in similar directions.

Everything after lower-casing runs as whole-batch numpy operations: a word's hash is a
polynomial over its bytes, read off a prefix sum, then passed through a 64-bit finaliser.
The hash never depends on Python's randomised ``hash``, so vectors are stable across
processes, machines and releases.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError
from .base import EmbedderBase, check_texts

__all__ = ["HashEmbedder"]

_MASK64 = (1 << 64) - 1
_POLY = 0x100000001B3  # odd, so it has an inverse modulo 2**64
_POLY_INV = pow(_POLY, -1, 1 << 64)
_BIGRAM_SALT = np.uint64(0x9E3779B97F4A7C15)
_TRIGRAM_SALT = np.uint64(0xC2B2AE3D27D4EB4F)

# bytes that belong to a word: ASCII letters and digits, and every byte of a multi-byte
# UTF-8 sequence
_WORD_BYTE = np.zeros(256, dtype=bool)
_WORD_BYTE[ord("0") : ord("9") + 1] = True
_WORD_BYTE[ord("a") : ord("z") + 1] = True
_WORD_BYTE[ord("A") : ord("Z") + 1] = True
_WORD_BYTE[0x80:] = True

_SEPARATOR = b"\n"  # not a word byte, so no word spans two texts
# Texts hashed per pass. Larger passes are a little faster alone, but their scratch arrays run
# to megabytes, which the allocator tends to map fresh and hand back on each call; with another
# thread busy (the vector linker) those page faults cost more than the passes save.
_CHUNK_TEXTS = 128


def _mix(keys: np.ndarray) -> np.ndarray:
    """The 64-bit finaliser of MurmurHash3: spreads every input bit over every output bit."""
    keys = keys ^ (keys >> np.uint64(33))
    keys = keys * np.uint64(0xFF51AFD7ED558CCD)
    keys = keys ^ (keys >> np.uint64(33))
    keys = keys * np.uint64(0xC4CEB9FE1A85EC53)
    return keys ^ (keys >> np.uint64(33))


class _Powers:
    """``base ** i`` modulo 2**64 for ``i`` in ``range(count)``, grown on demand and kept."""

    def __init__(self, base: int) -> None:
        self._base = base
        self._table = np.ones(1, dtype=np.uint64)

    def upto(self, count: int) -> np.ndarray:
        if len(self._table) < count:
            size = max(count, 2 * len(self._table))
            factors = np.full(size, self._base, dtype=np.uint64)
            factors[0] = 1
            self._table = np.cumprod(factors, dtype=np.uint64)
        return self._table[:count]


_POWERS = _Powers(_POLY)
_INVERSE_POWERS = _Powers(_POLY_INV)


class HashEmbedder(EmbedderBase):
    """Deterministic feature-hashing embedder: no model, no network, same vectors everywhere.

    ``dim`` is the vector length; ``seed`` picks another, independent hashing.

    >>> embedder = HashEmbedder(dim=64)
    >>> vectors = embedder.embed(["the cat sat on the mat", "a cat sat on a mat", "tax law"])
    >>> vectors.shape, vectors.dtype.name
    ((3, 64), 'float32')
    >>> bool(vectors[0] @ vectors[1] > vectors[0] @ vectors[2])
    True
    """

    UNIGRAM_WEIGHT = 1.0
    BIGRAM_WEIGHT = 0.5
    TRIGRAM_WEIGHT = 0.25

    def __init__(self, dim: int = 384, *, seed: int = 0) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise InvalidArgumentError(f"HashEmbedder dim must be a positive integer, got {dim!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidArgumentError(f"HashEmbedder seed must be an integer, got {seed!r}")
        self.dimension = dim
        self.seed = seed
        self.model_id = f"hash-v1-{dim}" if seed == 0 else f"hash-v1-{dim}-seed{seed}"
        self._salt = _mix(np.array([seed & _MASK64], dtype=np.uint64))[0]
        self._empty_bucket = int(self._salt % np.uint64(dim))

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` into L2-normalised ``float32`` rows of length ``dimension``.

        A text with no word gets a fixed unit vector, so every row has norm 1.
        """
        items = check_texts(texts)
        out = np.empty((len(items), self.dimension), dtype=np.float32)
        for start in range(0, len(items), _CHUNK_TEXTS):
            chunk = items[start : start + _CHUNK_TEXTS]
            self._embed_chunk(chunk, out[start : start + len(chunk)])
        return out

    def _embed_chunk(self, texts: list[str], out: np.ndarray) -> None:
        """Write the normalised vectors of ``texts`` into ``out``."""
        n, dim = len(texts), self.dimension
        encoded = [text.lower().encode("utf-8", "surrogatepass") for text in texts]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
        text_starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
        data = np.frombuffer(_SEPARATOR.join(encoded), dtype=np.uint8)

        keys, owners, weights = self._features(data, text_starts)
        buckets = (keys % np.uint64(dim)).astype(np.int64)
        signs = np.where(keys >> np.uint64(63), -1.0, 1.0)
        matrix = np.bincount(
            owners * dim + buckets, weights=signs * weights, minlength=n * dim
        ).reshape(n, dim)
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
        empty = norms == 0
        matrix[empty, self._empty_bucket] = 1.0
        norms[empty] = 1.0
        np.multiply(matrix, (1.0 / norms)[:, None], out=out, casting="unsafe")

    def _features(
        self, data: np.ndarray, text_starts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Hashed keys, owning text index and weight of every feature of the chunk."""
        is_word = _WORD_BYTE[data]
        edges = np.diff(np.concatenate(([0], is_word.view(np.int8), [0])))
        word_starts = np.flatnonzero(edges == 1)
        word_ends = np.flatnonzero(edges == -1)

        # polynomial hash of data[s:e] == (prefix[e] - prefix[s]) * POLY**-s  (mod 2**64)
        prefix = np.zeros(len(data) + 1, dtype=np.uint64)
        np.cumsum(data * _POWERS.upto(len(data)), out=prefix[1:])
        inverse = _INVERSE_POWERS.upto(len(data) + 1)
        raw = (prefix[word_ends] - prefix[word_starts]) * inverse[word_starts]
        words = _mix(raw ^ self._salt)
        word_owner = np.searchsorted(text_starts, word_starts, side="right") - 1

        same_text = word_owner[:-1] == word_owner[1:]
        bigrams = _mix((words[:-1][same_text] * _BIGRAM_SALT) ^ words[1:][same_text])
        bigram_owner = word_owner[:-1][same_text]

        at = np.flatnonzero(is_word[:-2] & is_word[1:-1] & is_word[2:])
        raw3 = (
            data[at].astype(np.uint64)
            | (data[at + 1].astype(np.uint64) << np.uint64(8))
            | (data[at + 2].astype(np.uint64) << np.uint64(16))
        )
        trigrams = _mix(raw3 ^ _TRIGRAM_SALT ^ self._salt)
        trigram_owner = np.searchsorted(text_starts, at, side="right") - 1

        keys = np.concatenate((words, bigrams, trigrams))
        owners = np.concatenate((word_owner, bigram_owner, trigram_owner))
        weights = np.concatenate(
            (
                np.full(len(words), self.UNIGRAM_WEIGHT),
                np.full(len(bigrams), self.BIGRAM_WEIGHT),
                np.full(len(trigrams), self.TRIGRAM_WEIGHT),
            )
        )
        return keys, owners, weights
