"""The language-model protocol: ``LanguageModel``, ``Generation`` and the abort-signal check.

A language model takes chat messages (``{"role", "content"}`` dicts) and returns a
``Generation``. When a JSON schema is passed as ``response_format`` the decoded JSON object is
in ``Generation.parsed``. Any object with ``generate`` (and, optionally, ``agenerate``) works.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..errors import AbortedError, ModelError

__all__ = [
    "ChatMessage",
    "Generation",
    "LanguageModel",
    "AbortSignal",
    "raise_if_aborted",
    "generate_async",
    "empty_usage",
    "add_usage",
    "parse_json_text",
]

ChatMessage = Mapping[str, Any]


@runtime_checkable
class AbortSignal(Protocol):
    """Anything with ``is_set()``, such as a ``threading.Event``."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class Generation:
    """One model answer: its ``text``, token ``usage`` and, for structured output, ``parsed``.

    ``usage`` has the keys ``input_tokens``, ``output_tokens`` and ``total_tokens``.

    >>> Generation("hi").usage["total_tokens"]
    0
    """

    text: str
    usage: dict[str, int] = field(default_factory=lambda: empty_usage())
    parsed: Any = None


@runtime_checkable
class LanguageModel(Protocol):
    """What summaries, extractors and titles need from a model."""

    def generate(self, messages: Sequence[ChatMessage], *,
                 response_format: Mapping[str, Any] | None = None, **settings: Any) -> Generation:
        """Answer ``messages``; with ``response_format`` (a JSON schema) also fill ``parsed``."""
        ...

    async def agenerate(self, messages: Sequence[ChatMessage], *,
                        response_format: Mapping[str, Any] | None = None,
                        **settings: Any) -> Generation:
        """The async twin of ``generate``."""
        ...


def raise_if_aborted(signal: Any) -> None:
    """Raise ``AbortedError`` when ``signal`` (anything with ``is_set()``) is set.

    >>> import threading
    >>> raise_if_aborted(None); raise_if_aborted(threading.Event())
    """
    if signal is not None and signal.is_set():
        raise AbortedError()


async def generate_async(model: Any, messages: Sequence[ChatMessage], *,
                         response_format: Mapping[str, Any] | None = None,
                         **settings: Any) -> Generation:
    """Call ``model.agenerate`` when it has one, else ``model.generate`` in a worker thread."""
    agenerate = getattr(model, "agenerate", None)
    if agenerate is not None:
        return await agenerate(messages, response_format=response_format, **settings)
    return await asyncio.to_thread(model.generate, messages, response_format=response_format,
                                   **settings)


def empty_usage() -> dict[str, int]:
    """A usage record with every count at zero."""
    return {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}


def add_usage(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    """The key-wise sum of two usage records."""
    return {key: int(a.get(key) or 0) + int(b.get(key) or 0) for key in empty_usage()}


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def parse_json_text(text: str, *, provider: str = "") -> Any:
    """Decode the JSON value a model wrote, tolerating code fences and prose around it.

    >>> parse_json_text('Sure: ```json\\n{"a": 1}\\n``` done')
    {'a': 1}
    """
    candidates = [text.strip()]
    candidates += [m.group(1).strip() for m in _FENCE.finditer(text)]
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            candidates.append(text[start:end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    raise ModelError("the model's answer is not valid JSON", provider=provider,
                     hint=f"answer began with {text[:120]!r}")
