"""Effects: the model calls and user callbacks a summary run asks for, and the two drivers
(sync and async) that perform them.

Summaries, extractors and titles are written once, as generators that ``yield`` an effect and
receive its result (or have its exception thrown in). ``run_sync`` and ``run_async`` drive
such a generator, so the sync and async public functions share every line of logic.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .models.base import generate_async

__all__ = ["ModelCall", "Callback", "Program", "run_sync", "run_async"]

T = TypeVar("T")


@dataclass(frozen=True)
class ModelCall:
    """Ask ``model`` to answer ``messages``; the result is a ``Generation``."""

    model: Any
    messages: Sequence[Mapping[str, Any]]
    response_format: Mapping[str, Any] | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def run(self) -> Any:
        return self.model.generate(self.messages, response_format=self.response_format,
                                   **self.settings)

    async def arun(self) -> Any:
        return await generate_async(self.model, self.messages,
                                    response_format=self.response_format, **self.settings)


@dataclass(frozen=True)
class Callback:
    """Call a user function (sync or async) with ``arg``; the result is what it returned."""

    fn: Callable[[Any], Any]
    arg: Any

    def run(self) -> Any:
        result = self.fn(self.arg)
        if inspect.isawaitable(result):
            return _await_blocking(result)
        return result

    async def arun(self) -> Any:
        result = self.fn(self.arg)
        if inspect.isawaitable(result):
            return await result
        return result


Program = Generator["ModelCall | Callback", Any, T]


def run_sync(program: Program[T]) -> T:
    """Perform each effect ``program`` yields, in this thread, and return its result."""
    send: Callable[[Any], Any] = program.send
    value: Any = None
    while True:
        try:
            effect = send(value)
        except StopIteration as stop:
            return stop.value
        try:
            value, send = effect.run(), program.send
        except Exception as exc:
            value, send = exc, program.throw


async def run_async(program: Program[T]) -> T:
    """Perform each effect ``program`` yields, awaiting async models and callbacks."""
    send: Callable[[Any], Any] = program.send
    value: Any = None
    while True:
        try:
            effect = send(value)
        except StopIteration as stop:
            return stop.value
        try:
            value, send = await effect.arun(), program.send
        except Exception as exc:
            value, send = exc, program.throw


def _await_blocking(awaitable: Any) -> Any:
    """Finish an awaitable from sync code, even when an event loop runs in this thread."""
    async def wrapper() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wrapper())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, wrapper()).result()
