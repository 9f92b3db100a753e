"""``OpenAIChatModel``: a client for any OpenAI-compatible ``/v1/chat/completions`` endpoint.

Works with OpenAI and hosted look-alikes as well as vLLM, llama.cpp's server and Ollama.
Transient failures (429, 5xx, connection errors, timeouts) are retried with exponential
backoff and jitter, honouring ``Retry-After``; other 4xx answers fail at once. Structured
output uses ``response_format={"type": "json_schema", ...}``; a server that rejects it gets
the schema in the prompt instead, and the JSON is read back out of the text.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import ModelError
from .base import ChatMessage, Generation, parse_json_text, raise_if_aborted

__all__ = ["OpenAIChatModel"]

RETRY_STATUSES = frozenset({408, 409, 425, 429}) | frozenset(range(500, 600))
# Settings a server may refuse for some models (reasoning models reject temperature, ...);
# when a 400 names one of them, it is dropped and the request sent again.
OPTIONAL_SETTINGS = ("temperature", "top_p", "max_tokens", "seed", "presence_penalty",
                     "frequency_penalty")
SETTING_ALIASES = {"max_output_tokens": "max_tokens"}


@dataclass
class _Retry:
    """An attempt that failed in a way worth retrying after ``delay`` seconds (or backoff)."""

    error: ModelError
    delay: float | None = None


@dataclass
class _Resend:
    """An attempt whose request must be rebuilt (a setting or response_format dropped)."""


class OpenAIChatModel:
    """A chat model behind an OpenAI-compatible HTTP API.

    ``base_url`` defaults to ``$OPENAI_BASE_URL`` then ``https://api.openai.com/v1``;
    ``api_key`` to ``$OPENAI_API_KEY`` (no key is sent when there is none, as local servers
    expect). ``generate`` takes chat dicts, an optional JSON-schema ``response_format``, an
    ``abort_signal`` (anything with ``is_set()``) and request settings such as
    ``temperature`` or ``max_output_tokens``.

    >>> OpenAIChatModel("qwen3", base_url="http://127.0.0.1:8000/v1/").url
    'http://127.0.0.1:8000/v1/chat/completions'
    """

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 60, max_retries: int = 8, provider: str = "openai",
                 headers: Mapping[str, str] | None = None, backoff_base: float = 0.5,
                 backoff_max: float = 30.0) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ModelError("a model name is required", provider=provider)
        self.model = model
        self.provider = provider
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL")
                         or "https://api.openai.com/v1").rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.headers = {"Content-Type": "application/json", **dict(headers or {})}
        if self.api_key:
            self.headers["Authorization"] = f"Bearer {self.api_key}"
        self.supports_json_schema = True
        self._refused: set[str] = set()
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    @property
    def model_id(self) -> str:
        return f"{self.provider}/{self.model}"

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model!r}, base_url={self.base_url!r})"

    # ----------------------------------------------------------------- public calls

    def generate(self, messages: Sequence[ChatMessage], *,
                 response_format: Mapping[str, Any] | None = None, abort_signal: Any = None,
                 **settings: Any) -> Generation:
        """Send ``messages`` and return the answer, retrying transient failures."""
        client = self._sync_client()
        attempt = 0
        while True:
            raise_if_aborted(abort_signal)
            body = self._body(messages, response_format, settings)
            try:
                response = client.post(self.url, json=body, headers=self.headers)
                outcome = self._outcome(response, response_format, body)
            except httpx.HTTPError as exc:
                outcome = self._transport_failure(exc)
            raise_if_aborted(abort_signal)
            if isinstance(outcome, Generation):
                return outcome
            if isinstance(outcome, _Retry):
                delay = self._delay(outcome, attempt)
                attempt += 1
                _wait(delay, abort_signal)

    async def agenerate(self, messages: Sequence[ChatMessage], *,
                        response_format: Mapping[str, Any] | None = None,
                        abort_signal: Any = None, **settings: Any) -> Generation:
        """The async twin of ``generate``."""
        attempt = 0
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            while True:
                raise_if_aborted(abort_signal)
                body = self._body(messages, response_format, settings)
                try:
                    response = await client.post(self.url, json=body, headers=self.headers)
                    outcome = self._outcome(response, response_format, body)
                except httpx.HTTPError as exc:
                    outcome = self._transport_failure(exc)
                raise_if_aborted(abort_signal)
                if isinstance(outcome, Generation):
                    return outcome
                if isinstance(outcome, _Retry):
                    delay = self._delay(outcome, attempt)
                    attempt += 1
                    await _await_wait(delay, abort_signal)

    def close(self) -> None:
        """Close the pooled HTTP connections."""
        if self._client is not None:
            self._client.close()
            self._client = None

    # ----------------------------------------------------------------- request and answer

    def _sync_client(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout)
            return self._client

    def _body(self, messages: Sequence[ChatMessage], response_format: Mapping[str, Any] | None,
              settings: Mapping[str, Any]) -> dict[str, Any]:
        chat = [{"role": m["role"], "content": m["content"]} for m in messages]
        body: dict[str, Any] = {"model": self.model}
        for key, value in settings.items():
            key = SETTING_ALIASES.get(key, key)
            if value is not None and key not in self._refused:
                body[key] = value
        if response_format is not None:
            if self.supports_json_schema:
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "response", "schema": dict(response_format),
                                    "strict": False},
                }
            else:
                chat.append({"role": "system", "content": schema_instruction(response_format)})
        body["messages"] = chat
        return body

    def _outcome(self, response: httpx.Response, response_format: Mapping[str, Any] | None,
                 body: Mapping[str, Any]) -> Generation | _Retry | _Resend:
        status = response.status_code
        if status in RETRY_STATUSES:
            return _Retry(self._error(response, "the server is busy or failing"),
                          _retry_after(response.headers.get("retry-after")))
        if status in (400, 422):
            message = _error_text(response).lower()
            if "response_format" in body and ("response_format" in message
                                              or "json_schema" in message):
                self.supports_json_schema = False
                return _Resend()
            refused = [k for k in OPTIONAL_SETTINGS if k in body and k in message]
            if refused:
                self._refused.update(refused)
                return _Resend()
        if status >= 400:
            raise self._error(response, "the request was refused")
        return self._generation(response, response_format)

    def _generation(self, response: httpx.Response,
                    response_format: Mapping[str, Any] | None) -> Generation:
        try:
            payload = response.json()
            choice = payload["choices"][0]["message"]
            text = choice.get("content") or ""
            if not isinstance(text, str):
                raise TypeError("content is not a string")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            detail = _error_text(response)[:300]
            raise ModelError(f"the server's answer is not a chat completion: {detail}",
                             provider=self.provider, status=response.status_code,
                             hint=f"is {self.url} an OpenAI-compatible endpoint? ({exc})") from None
        usage = payload.get("usage") or {}
        inp, out = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        total = int(usage.get("total_tokens") or inp + out)
        parsed = None
        if response_format is not None:
            parsed = parse_json_text(text, provider=self.provider)
        return Generation(text, {"input_tokens": inp, "output_tokens": out,
                                 "total_tokens": total}, parsed)

    def _error(self, response: httpx.Response, what: str) -> ModelError:
        status = response.status_code
        hints = {401: "check the API key", 403: "check the API key and its permissions",
                 404: "check the model name and base URL", 429: "rate limited; slow down"}
        detail = _error_text(response)[:500]
        return ModelError(f"{what}: {detail}" if detail else what, provider=self.provider,
                          status=status, hint=hints.get(status, ""))

    def _transport_failure(self, exc: httpx.HTTPError) -> _Retry:
        if isinstance(exc, httpx.TimeoutException):
            error = ModelError(f"no answer within {self.timeout:g}s", provider=self.provider,
                               hint="raise timeout= or check the server")
        else:
            error = ModelError(f"could not reach {self.url}: {exc}", provider=self.provider,
                               hint="check the base URL and that the server is running")
        return _Retry(error)

    def _delay(self, retry: _Retry, attempt: int) -> float:
        if attempt >= self.max_retries:
            raise ModelError(f"{retry.error} (gave up after {attempt + 1} attempts)",
                             provider=self.provider, status=retry.error.status,
                             hint=retry.error.hint) from None
        if retry.delay is not None:
            return retry.delay
        backoff = min(self.backoff_max, self.backoff_base * 2 ** attempt)
        return backoff * (0.5 + random.random() / 2)


def schema_instruction(schema: Mapping[str, Any]) -> str:
    """The prompt text that asks for JSON matching ``schema`` when the server cannot enforce it."""
    return ("Answer with one JSON object and nothing else (no prose, no code fence). "
            "It must match this JSON schema:\n" + json.dumps(schema, ensure_ascii=False))


def _error_text(response: httpx.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text.strip()
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            return str(error.get("message") or json.dumps(error))
        return str(error)
    return json.dumps(payload)


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _wait(seconds: float, abort_signal: Any) -> None:
    """Sleep, waking early (and raising) if the abort signal is set meanwhile."""
    if abort_signal is not None and hasattr(abort_signal, "wait"):
        abort_signal.wait(seconds)
    else:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            raise_if_aborted(abort_signal)
            time.sleep(min(left, 0.05))
    raise_if_aborted(abort_signal)


async def _await_wait(seconds: float, abort_signal: Any) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        raise_if_aborted(abort_signal)
        await asyncio.sleep(min(left, 0.05))
    raise_if_aborted(abort_signal)
