"""Memory configuration: ``MemoryConfig``, ``SemanticRecallConfig``, ``WorkingMemoryConfig``.

Plain dicts with the same keys are accepted wherever a config object is; ``merge`` deep-merges
a per-call config over the instance's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, TypeGuard

from .errors import ConfigurationError, InvalidArgumentError

__all__ = ["MemoryConfig", "SemanticRecallConfig", "WorkingMemoryConfig", "merge"]

DEFAULT_TOP_K = 4
DEFAULT_MESSAGE_RANGE = 1
RECALL_MODES = ("vector", "lexical", "hybrid")


@dataclass(frozen=True)
class SemanticRecallConfig:
    top_k: int = DEFAULT_TOP_K
    message_range: int | Mapping[str, int] = DEFAULT_MESSAGE_RANGE
    scope: str = "resource"
    threshold: float | None = None
    filter: Mapping[str, Any] | None = None
    index_name: str | None = None
    mode: str = "vector"
    # hybrid mode: the weight of the BM25 ranking against the vector ranking's 1 (None: the
    # tuned default, ``hybrid.LEXICAL_WEIGHT``)
    lexical_weight: float | None = None

    def __post_init__(self) -> None:
        if self.scope not in ("thread", "resource"):
            raise ConfigurationError(f"semantic_recall.scope must be 'thread' or 'resource', got {self.scope!r}")
        if self.mode not in RECALL_MODES:
            raise ConfigurationError(
                f"semantic_recall.mode must be 'vector', 'lexical' or 'hybrid', got {self.mode!r}"
            )
        if not is_count(self.top_k) or self.top_k < 1:
            raise ConfigurationError(f"semantic_recall.top_k must be a positive integer, got {self.top_k!r}")
        self.range()  # validates message_range
        weight = self.lexical_weight
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                                   or not 0 <= weight < float("inf")):
            raise ConfigurationError(
                f"semantic_recall.lexical_weight must be a finite number >= 0, got {weight!r}"
            )

    def range(self) -> tuple[int, int]:
        """``(before, after)`` neighbour counts."""
        value = self.message_range
        if is_count(value):
            before = after = value
        elif isinstance(value, Mapping):
            before, after = value.get("before", 0), value.get("after", 0)
        else:
            before = after = -1
        if not (is_count(before) and is_count(after)):
            raise ConfigurationError(
                "semantic_recall.message_range must be a non-negative integer or "
                f"{{'before': n, 'after': n}}, got {value!r}"
            )
        return before, after


@dataclass(frozen=True)
class WorkingMemoryConfig:
    enabled: bool = False
    template: str | None = None
    schema: Any = None
    scope: str = "resource"

    def __post_init__(self) -> None:
        if self.scope not in ("thread", "resource"):
            raise ConfigurationError(f"working_memory.scope must be 'thread' or 'resource', got {self.scope!r}")


@dataclass(frozen=True)
class MemoryConfig:
    last_messages: int | bool = 10
    semantic_recall: bool | SemanticRecallConfig = False
    working_memory: WorkingMemoryConfig = field(default_factory=WorkingMemoryConfig)
    generate_title: bool | Mapping[str, Any] = False

    def __post_init__(self) -> None:
        lm = self.last_messages
        if not (lm is False or is_count(lm)):
            raise InvalidArgumentError("lastMessages must be a finite non-negative integer")
        if isinstance(self.semantic_recall, Mapping):
            object.__setattr__(self, "semantic_recall", SemanticRecallConfig(**self.semantic_recall))
        elif self.semantic_recall is True:
            object.__setattr__(self, "semantic_recall", SemanticRecallConfig())
        if isinstance(self.working_memory, Mapping):
            object.__setattr__(self, "working_memory", WorkingMemoryConfig(**self.working_memory))

    @property
    def semantic(self) -> SemanticRecallConfig | None:
        """The semantic-recall settings, or None when it is off."""
        sr = self.semantic_recall
        return sr if isinstance(sr, SemanticRecallConfig) else None

    @classmethod
    def coerce(cls, value: MemoryConfig | Mapping[str, Any] | None) -> MemoryConfig:
        if value is None:
            return cls()
        if isinstance(value, MemoryConfig):
            return value
        if isinstance(value, Mapping):
            _reject_moved_options(value)
            return cls(**dict(value))
        raise ConfigurationError(f"options must be a MemoryConfig or a dict, got {type(value).__name__}")


def merge(base: MemoryConfig, override: MemoryConfig | Mapping[str, Any] | None) -> MemoryConfig:
    """Deep-merge ``override`` over ``base`` (only keys the override sets win)."""
    if override is None:
        return base
    if isinstance(override, MemoryConfig):
        override = _explicit(override)
    _reject_moved_options(override)
    merged = _deep_merge(_plain(base), dict(override))
    return MemoryConfig(**merged)


def _reject_moved_options(value: Mapping[str, Any]) -> None:
    threads = value.get("threads")
    if isinstance(threads, Mapping) and "generate_title" in threads:
        raise ConfigurationError(
            "The threads.generateTitle option has been moved. Use the top-level generateTitle option instead."
        )
    wm = value.get("working_memory")
    if isinstance(wm, Mapping) and "use" in wm:
        raise ConfigurationError(
            "The workingMemory.use option has been removed. Working memory always uses tool-call mode."
        )
    unknown = set(value) - {f.name for f in fields(MemoryConfig)}
    if unknown:
        raise ConfigurationError(f"unknown memory option(s): {', '.join(sorted(unknown))}")


def _explicit(config: MemoryConfig) -> dict[str, Any]:
    """The fields of a config object that differ from the defaults."""
    default = MemoryConfig()
    return {f.name: _plain(getattr(config, f.name)) for f in fields(MemoryConfig)
            if getattr(config, f.name) != getattr(default, f.name)}


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    return value


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        value = _plain(value)
        current = _plain(out.get(key))
        if isinstance(value, Mapping) and isinstance(current, Mapping) and key != "filter":
            out[key] = _deep_merge(dict(current), value)
        else:
            out[key] = value
    return out


def is_count(value: Any) -> TypeGuard[int]:
    """A non-negative int (and not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
