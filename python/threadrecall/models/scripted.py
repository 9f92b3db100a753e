"""``ScriptedModel``: a language model that answers from a queue, for tests and examples."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ModelError
from .base import ChatMessage, Generation, empty_usage, parse_json_text

__all__ = ["ScriptedModel", "ScriptedCall"]


@dataclass(frozen=True)
class ScriptedCall:
    """One request a ``ScriptedModel`` received."""

    messages: list[dict[str, Any]]
    response_format: Mapping[str, Any] | None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        """Every message's content, joined by blank lines."""
        return "\n\n".join(str(m.get("content", "")) for m in self.messages)

    @property
    def system(self) -> str:
        """The content of the system messages."""
        return "\n\n".join(str(m["content"]) for m in self.messages if m.get("role") == "system")


class ScriptedModel:
    """Answers each call with the next queued response and records what it was asked.

    A response is a ``str`` (the text; decoded as JSON into ``parsed`` when the call asked for
    structured output), a ``dict``/``list`` (structured output; the text is its JSON), a
    ``Generation`` (returned as is), an exception (raised) or a callable
    ``f(messages, response_format) -> any of these``. ``usage`` is reported on every answer.

    >>> model = ScriptedModel(["<observations>* hi</observations>"])
    >>> model.generate([{"role": "user", "content": "hello"}]).text
    '<observations>* hi</observations>'
    >>> model.calls[0].prompt
    'hello'
    """

    def __init__(self, responses: Sequence[Any] = (), *, usage: Mapping[str, int] | None = None,
                 model_id: str = "scripted/model") -> None:
        self._queue = list(responses)
        self.usage = dict(usage) if usage is not None else empty_usage()
        self.model_id = model_id
        self.calls: list[ScriptedCall] = []
        self._lock = threading.Lock()

    def push(self, *responses: Any) -> None:
        """Queue more responses."""
        with self._lock:
            self._queue.extend(responses)

    @property
    def remaining(self) -> int:
        """How many queued responses are left."""
        return len(self._queue)

    def generate(self, messages: Sequence[ChatMessage], *,
                 response_format: Mapping[str, Any] | None = None, **settings: Any) -> Generation:
        """Record the call and answer with the next queued response."""
        with self._lock:
            self.calls.append(ScriptedCall([dict(m) for m in messages], response_format,
                                           dict(settings)))
            if not self._queue:
                raise ModelError("ScriptedModel has no response left for this call",
                                 provider="scripted")
            response = self._queue.pop(0)
        if callable(response) and not isinstance(response, type):
            response = response(list(messages), response_format)
        return self._generation(response, response_format)

    async def agenerate(self, messages: Sequence[ChatMessage], *,
                        response_format: Mapping[str, Any] | None = None,
                        **settings: Any) -> Generation:
        """The async twin of ``generate``."""
        return self.generate(messages, response_format=response_format, **settings)

    def _generation(self, response: Any, response_format: Mapping[str, Any] | None) -> Generation:
        if isinstance(response, BaseException):
            raise response
        if isinstance(response, Generation):
            return response
        if isinstance(response, (dict, list)):
            return Generation(json.dumps(response), dict(self.usage), response)
        if isinstance(response, str):
            parsed = None
            if response_format is not None:
                parsed = parse_json_text(response, provider="scripted")
            return Generation(response, dict(self.usage), parsed)
        raise TypeError(f"ScriptedModel cannot answer with a {type(response).__name__}")

