"""``OpenAIEmbedder``: any OpenAI-compatible ``/v1/embeddings`` endpoint, over httpx.

Texts go out in batches of ``batch_size``. A 429, a 5xx or a connection failure is retried
with exponential backoff (honouring ``Retry-After``); any other 4xx is not. Every returned
vector is checked against the expected dimension. Failures surface as ``ModelError`` with
``provider="openai"``, the HTTP status and a hint.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import httpx
import numpy as np

from ..errors import ConfigurationError, DimensionMismatchError, InvalidArgumentError, ModelError
from .base import EmbedderBase, check_texts, l2_normalize

__all__ = ["KNOWN_DIMENSIONS", "OpenAIEmbedder"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
_SHORTENABLE = ("text-embedding-3-small", "text-embedding-3-large")  # accept `dimensions`
_MAX_DELAY = 30.0  # seconds, for computed backoff
_MAX_RETRY_AFTER = 60.0  # seconds, for a server's Retry-After


def _check_count(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(
            f"OpenAIEmbedder {name} must be an integer >= {minimum}, got {value!r}"
        )


class OpenAIEmbedder(EmbedderBase):
    """Embeddings from an OpenAI-compatible HTTP endpoint.

    ``base_url`` is the API root including ``/v1`` (default: ``OPENAI_BASE_URL`` or
    OpenAI's); ``api_key`` defaults to ``OPENAI_API_KEY``. ``dimension`` is needed only for a
    model whose dimension is not known (otherwise one probe call is made when it is first
    read); for ``text-embedding-3-*`` a smaller ``dimension`` is requested from the server.
    ``backoff`` is the first retry delay in seconds, doubled on each retry. After each call,
    ``last_usage`` holds ``{"tokens": n}`` as reported by the server.

    >>> embedder = OpenAIEmbedder(base_url="http://127.0.0.1:9/v1")
    >>> embedder.model_id, embedder.dimension
    ('text-embedding-3-small', 1536)
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimension: int | None = None,
        batch_size: int = 256,
        max_retries: int = 5,
        timeout: float = 30,
        backoff: float = 0.5,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidArgumentError(
                f"OpenAIEmbedder model must be a non-blank string, got {model!r}"
            )
        if dimension is not None:
            _check_count("dimension", dimension, 1)
        _check_count("batch_size", batch_size, 1)
        _check_count("max_retries", max_retries, 0)
        for name, value in (("timeout", timeout), ("backoff", backoff)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InvalidArgumentError(
                    f"OpenAIEmbedder {name} must be a number >= 0, got {value!r}"
                )
        self.model = self.model_id = model
        root = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = root.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not self.api_key and self.base_url == DEFAULT_BASE_URL:
            raise ConfigurationError(
                "OpenAIEmbedder needs an API key for OpenAI: pass api_key= or set OPENAI_API_KEY"
            )
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.timeout = float(timeout)
        self.backoff = float(backoff)
        self.last_usage: dict[str, int] | None = None
        native = KNOWN_DIMENSIONS.get(model)
        self._dimension = dimension or native
        self._requested_dimensions = (
            dimension if model in _SHORTENABLE and dimension not in (None, native) else None
        )
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    # -- the protocol -------------------------------------------------------------------------

    @property
    def dimension(self) -> int:
        """The vector length; for an unknown model without ``dimension=``, probed once."""
        if self._dimension is None:
            self.embed(["a"])  # the response sets it
        return self._dimension  # type: ignore[return-value]

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` in batches of ``batch_size``; rows are L2-normalised ``float32``."""
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        client = self._sync_client()
        parts, tokens = [], 0
        for start in range(0, len(items), self.batch_size):
            batch = items[start : start + self.batch_size]
            response = self._post(client, batch)
            vectors, used = self._parse(response, len(batch))
            parts.append(vectors)
            tokens += used
        self.last_usage = {"tokens": tokens}
        return l2_normalize(np.vstack(parts))

    async def aembed(self, texts: list[str]) -> np.ndarray:
        """The async twin of :meth:`embed` (httpx's async client, ``asyncio.sleep`` backoff)."""
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts, tokens = [], 0
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for start in range(0, len(items), self.batch_size):
                batch = items[start : start + self.batch_size]
                response = await self._apost(client, batch)
                vectors, used = self._parse(response, len(batch))
                parts.append(vectors)
                tokens += used
        self.last_usage = {"tokens": tokens}
        return l2_normalize(np.vstack(parts))

    def close(self) -> None:
        """Close the pooled HTTP connections (a later call opens new ones)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> OpenAIEmbedder:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request, with retries --------------------------------------------------------------

    @property
    def _url(self) -> str:
        return f"{self.base_url}/embeddings"

    def _request(self, batch: list[str]) -> dict[str, Any]:
        """Keyword arguments of the POST for ``batch``."""
        # the API refuses empty strings; a single space embeds as "nothing"
        payload: dict[str, Any] = {
            "model": self.model,
            "input": [text if text else " " for text in batch],
            "encoding_format": "float",
        }
        if self._requested_dimensions is not None:
            payload["dimensions"] = self._requested_dimensions
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return {"json": payload, "headers": headers}

    def _sync_client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout)
            return self._client

    def _post(self, client: httpx.Client, batch: list[str]) -> httpx.Response:
        request = self._request(batch)
        attempt = 0
        while True:
            try:
                response, failure = client.post(self._url, **request), None
            except httpx.TransportError as exc:
                response, failure = None, exc
            delay = self._retry_delay(attempt, response, failure)
            if delay is None:
                return response  # type: ignore[return-value]
            time.sleep(delay)
            attempt += 1

    async def _apost(self, client: httpx.AsyncClient, batch: list[str]) -> httpx.Response:
        request = self._request(batch)
        attempt = 0
        while True:
            try:
                response, failure = await client.post(self._url, **request), None
            except httpx.TransportError as exc:
                response, failure = None, exc
            delay = self._retry_delay(attempt, response, failure)
            if delay is None:
                return response  # type: ignore[return-value]
            await asyncio.sleep(delay)
            attempt += 1

    def _retry_delay(
        self, attempt: int, response: httpx.Response | None, failure: Exception | None
    ) -> float | None:
        """``None`` for a success, else the delay before the next try; raises when giving up."""
        if response is not None and response.is_success:
            return None
        retryable = failure is not None or (
            response is not None and (response.status_code == 429 or response.status_code >= 500))
        if not retryable:
            raise self._http_error(response, retries=attempt)  # type: ignore[arg-type]
        if attempt >= self.max_retries:
            if failure is not None:
                raise ModelError(
                    f"embedding request to {self._url} failed: {failure!r}",
                    provider="openai",
                    hint=f"could not reach the server after {attempt} retries; "
                    "check base_url / OPENAI_BASE_URL",
                ) from failure
            raise self._http_error(response, retries=attempt)  # type: ignore[arg-type]
        delay = min(self.backoff * 2**attempt, _MAX_DELAY)
        retry_after = response.headers.get("retry-after") if response is not None else None
        if retry_after is not None:
            try:
                delay = min(max(float(retry_after), 0.0), _MAX_RETRY_AFTER)
            except ValueError:
                pass  # an HTTP date: keep the computed backoff
        return delay

    def _http_error(self, response: httpx.Response, *, retries: int) -> ModelError:
        status = response.status_code
        detail = _error_message(response)
        if status in (401, 403):
            hint = "check the API key (api_key= or OPENAI_API_KEY)"
        elif status == 404:
            hint = f"check the model name {self.model!r} and base_url (the API root, ending in /v1)"
        elif status == 429:
            hint = f"rate limited; gave up after {retries} retries"
        elif status >= 500:
            hint = f"the server failed; gave up after {retries} retries"
        else:
            hint = "the server rejected the request; it was not retried"
        return ModelError(
            f"embedding request to {self._url} failed: {detail}",
            provider="openai",
            status=status,
            hint=hint,
        )

    # -- the response ---------------------------------------------------------------------------

    def _parse(self, response: httpx.Response, expected: int) -> tuple[np.ndarray, int]:
        """The ``(expected, dimension)`` float32 matrix and the token count of a response."""
        try:
            body = response.json()
            data = body["data"]
            if not isinstance(data, list) or len(data) != expected:
                raise ValueError(f"expected {expected} embeddings, got {_count(data)}")
            if all(isinstance(item.get("index"), int) for item in data):
                data = sorted(data, key=lambda item: item["index"])
            rows = [item["embedding"] for item in data]
            if not all(isinstance(row, list) and row for row in rows):
                raise ValueError("an embedding is not a non-empty list of numbers")
            lengths = {len(row) for row in rows}
            if len(lengths) != 1:
                raise ValueError(f"embeddings of different lengths {sorted(lengths)}")
            vectors = np.asarray(rows, dtype=np.float32)
            if not np.isfinite(vectors).all():
                raise ValueError("an embedding holds a non-finite number")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ModelError(
                f"malformed embeddings response from {self._url}: {exc}",
                provider="openai",
                status=response.status_code,
                hint="the server does not speak the OpenAI embeddings format",
            ) from None
        self._check_dimension(vectors.shape[1])
        return vectors, _tokens(body)

    def _check_dimension(self, length: int) -> None:
        with self._lock:
            if self._dimension is None:
                self._dimension = length
        if length != self._dimension:
            raise DimensionMismatchError(
                f"{self.model} returned vectors of length {length}, expected {self._dimension}"
            )


def _error_message(response: httpx.Response) -> str:
    """The server's own error text when it sent one, else the status line."""
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return str(message)
    except (ValueError, AttributeError):
        pass
    return f"HTTP {response.status_code} {response.reason_phrase}".strip()


def _count(value: object) -> object:
    return len(value) if isinstance(value, list) else type(value).__name__


def _tokens(body: dict[str, Any]) -> int:
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return 0
    tokens = usage.get("total_tokens", usage.get("prompt_tokens", 0))
    return tokens if isinstance(tokens, int) else 0
