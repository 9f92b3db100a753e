"""``ModelSpec``: what a sentence-embedding model directory declares, read without running it.

A directory exported from sentence-transformers (or laid out by hand) holds:

- the ONNX graph: ``model.onnx``, else ``onnx/model.onnx``, else the only ``*.onnx`` file;
- the tokenizer: ``tokenizer.json`` (read by ``tokenizers``), else a WordPiece ``vocab.txt``
  (lower-cased unless ``tokenizer_config.json`` says ``"do_lower_case": false``);
- optionally ``modules.json`` naming the pooling folder (``1_Pooling/config.json``:
  ``pooling_mode_cls_token``, ``pooling_mode_mean_tokens``, ``pooling_mode_lasttoken``) and
  whether a ``Normalize`` module follows;
- optionally ``sentence_bert_config.json`` (``max_seq_length``), ``config.json``
  (``hidden_size``, ``max_position_embeddings``) and ``config_sentence_transformers.json``
  (``prompts``: the ``query`` and the ``document`` or ``passage`` prompt).

Each value can be overridden by a keyword of ``ModelSpec.from_directory`` (and of
``LocalEmbedder``); what neither the directory nor a keyword gives takes the usual default
(mean pooling, normalised rows, 256 tokens, no prompts).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeGuard

from ..errors import ConfigurationError, InvalidArgumentError

__all__ = ["POOLINGS", "ModelSpec"]

POOLINGS = ("mean", "cls", "last")
DEFAULT_MAX_LENGTH = 256
_POOLING_KEYS = {  # sentence-transformers' Pooling config keys, in the order they are tried
    "pooling_mode_cls_token": "cls",
    "pooling_mode_lasttoken": "last",
    "pooling_mode_mean_tokens": "mean",
}
_DOCUMENT_PROMPT_NAMES = ("document", "passage", "doc")
_UNSET: Any = object()


@dataclass(frozen=True)
class ModelSpec:
    """Everything ``LocalEmbedder`` needs to know about one model.

    ``tokenizer`` is a ``tokenizer.json`` or a ``vocab.txt``; ``dimension`` is ``None`` when
    the directory does not say it (it is then read from the graph on first use); a smaller
    ``dimension`` than the model's keeps the leading components (Matryoshka models).
    ``max_positions`` bounds ``max_length``.

    >>> spec = ModelSpec(model_id="m", onnx_path=Path("m.onnx"), tokenizer=Path("vocab.txt"))
    >>> spec.pooling, spec.normalize, spec.max_length, spec.query_prompt
    ('mean', True, 256, '')
    """

    model_id: str
    onnx_path: Path
    tokenizer: Path
    lowercase: bool = True
    pooling: str = "mean"
    normalize: bool = True
    max_length: int = DEFAULT_MAX_LENGTH
    max_positions: int = 512
    dimension: int | None = None
    query_prompt: str = ""
    document_prompt: str = ""

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise InvalidArgumentError(
                f"LocalEmbedder pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}"
            )
        for name in ("query_prompt", "document_prompt"):
            if not isinstance(getattr(self, name), str):
                raise InvalidArgumentError(
                    f"LocalEmbedder {name} must be a string, got {getattr(self, name)!r}"
                )
        if not isinstance(self.normalize, bool):
            raise InvalidArgumentError(
                f"LocalEmbedder normalize must be True or False, got {self.normalize!r}"
            )
        if not _is_positive(self.max_length) or self.max_length > self.max_positions:
            raise InvalidArgumentError(
                f"LocalEmbedder max_length must be a positive integer no larger than "
                f"{self.max_positions}, got {self.max_length!r}"
            )
        if self.max_length < 2:
            raise InvalidArgumentError(
                "LocalEmbedder max_length must leave room for the special tokens"
            )
        if self.dimension is not None and not _is_positive(self.dimension):
            raise InvalidArgumentError(
                f"LocalEmbedder dimension must be a positive integer, got {self.dimension!r}"
            )
        if not isinstance(self.model_id, str) or not self.model_id.strip():
            raise InvalidArgumentError(
                f"LocalEmbedder model_id must be a non-blank string, got {self.model_id!r}"
            )

    @property
    def asymmetric(self) -> bool:
        """Whether queries and documents are embedded differently."""
        return self.query_prompt != self.document_prompt

    def with_overrides(self, **overrides: Any) -> ModelSpec:
        """A copy with every keyword that is not ``None`` applied."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def from_directory(cls, directory: str | Path, **overrides: Any) -> ModelSpec:
        """Read a model directory; keywords (``pooling=``, ``query_prompt=``, ...) win.

        Raises ``ConfigurationError`` when the directory lacks a graph or a tokenizer.
        """
        root = Path(directory).expanduser()
        if not root.is_dir():
            raise ConfigurationError(f"the model directory {root} does not exist")
        onnx_file = overrides.pop("onnx_file", None)
        declared: dict[str, Any] = {
            "model_id": root.resolve().name,
            "onnx_path": _onnx_path(root, onnx_file),
            "tokenizer": _tokenizer_path(root),
            **_tokenizer_settings(root),
            **_lengths(root),
            **_pooling_settings(root),  # its dimension is the pooled one: it wins
            **_prompts(root),
        }
        return cls(**declared).with_overrides(**overrides)

    @classmethod
    def from_package(cls, name: str, **overrides: Any) -> ModelSpec:
        """The model directory inside an installed package (its ``model_dir()`` or
        ``model_path()`` when it has one, else the package's own folder); the model id is
        the package name unless ``model_id=`` says otherwise."""
        if importlib.util.find_spec(name) is None:
            raise ConfigurationError(
                f"no model directory or installed package is named {name!r}; install the "
                f"package, or pass the path of a directory holding the ONNX model"
            )
        module = importlib.import_module(name)
        if overrides.get("model_id") is None:
            overrides["model_id"] = name
        for function in ("model_dir", "get_model_path", "model_path"):
            found = getattr(module, function, None)
            if callable(found):
                path = Path(found())
                return cls.from_directory(path if path.is_dir() else path.parent, **overrides)
        folders = list(getattr(module, "__path__", []))
        if not folders:
            raise ConfigurationError(f"the module {name!r} is not a package holding a model")
        return cls.from_directory(folders[0], **overrides)


def _is_positive(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the model file {path}: {exc}") from None
    return value if isinstance(value, dict) else {}


def _onnx_path(root: Path, name: str | None) -> Path:
    if name is not None:
        path = root / name
        if not path.is_file():
            raise ConfigurationError(f"the model file {path} does not exist")
        return path
    for candidate in (root / "model.onnx", root / "onnx" / "model.onnx"):
        if candidate.is_file():
            return candidate
    found = sorted(root.rglob("*.onnx"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise ConfigurationError(f"the model directory {root} holds no .onnx file")
    names = ", ".join(str(p.relative_to(root)) for p in found)
    raise ConfigurationError(
        f"the model directory {root} holds several .onnx files ({names}); choose one with onnx_file="
    )


def _tokenizer_path(root: Path) -> Path:
    for name in ("tokenizer.json", "vocab.txt"):
        if (root / name).is_file():
            return root / name
    raise ConfigurationError(f"the model directory {root} has neither tokenizer.json nor vocab.txt")


def _tokenizer_settings(root: Path) -> dict[str, Any]:
    config = _read_json(root / "tokenizer_config.json")
    lowercase = config.get("do_lower_case")
    return {"lowercase": lowercase} if isinstance(lowercase, bool) else {}


def _modules(root: Path) -> list[dict[str, Any]]:
    path = root / "modules.json"
    if not path.is_file():
        return []
    try:
        value = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the model file {path}: {exc}") from None
    return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []


def _pooling_settings(root: Path) -> dict[str, Any]:
    modules = _modules(root)
    out: dict[str, Any] = {}
    pooling_dirs = [m.get("path", "") for m in modules if str(m.get("type", "")).endswith(".Pooling")]
    folder = root / pooling_dirs[0] if pooling_dirs else root / "1_Pooling"
    config = _read_json(folder / "config.json")
    for key, mode in _POOLING_KEYS.items():
        if config.get(key) is True:
            out["pooling"] = mode
            break
    if _is_positive(config.get("word_embedding_dimension")):
        out["dimension"] = config["word_embedding_dimension"]
    if modules:
        out["normalize"] = any(str(m.get("type", "")).endswith(".Normalize") for m in modules)
    return out


def _lengths(root: Path) -> dict[str, Any]:
    config = _read_json(root / "config.json")
    out: dict[str, Any] = {}
    positions = config.get("max_position_embeddings")
    if _is_positive(positions):
        # RoBERTa-style models (MPNet, XLM-R) reserve the first two positions for padding
        offset = 2 if config.get("model_type") in ("mpnet", "roberta", "xlm-roberta") else 0
        out["max_positions"] = positions - offset
    if _is_positive(config.get("hidden_size")):
        out["dimension"] = config["hidden_size"]
    length = _read_json(root / "sentence_bert_config.json").get("max_seq_length")
    if _is_positive(length):
        out["max_length"] = min(length, out.get("max_positions", length))
    elif "max_positions" in out:
        out["max_length"] = min(DEFAULT_MAX_LENGTH, out["max_positions"])
    return out


def _prompts(root: Path) -> dict[str, Any]:
    config = _read_json(root / "config_sentence_transformers.json")
    prompts = config.get("prompts")
    if not isinstance(prompts, dict):
        return {}
    prompts = {k: v for k, v in prompts.items() if isinstance(v, str)}
    out: dict[str, Any] = {}
    if "query" in prompts:
        out["query_prompt"] = prompts["query"]
    for name in (*_DOCUMENT_PROMPT_NAMES, config.get("default_prompt_name")):
        if name in prompts and name != "query":
            out["document_prompt"] = prompts[name]
            break
    return out
