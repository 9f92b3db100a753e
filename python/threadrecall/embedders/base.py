"""The ``Embedder`` protocol and the behaviour every shipped embedder shares.

An embedder turns a list of texts into a ``float32`` matrix of shape ``(n, dimension)``. The
shipped embedders return L2-normalised rows, so a dot product is a cosine similarity.

An embedder for an asymmetric model (one that embeds a search query differently from the
text it should find, e.g. with a ``"query: "`` prompt) also has ``embed_query`` and
``aembed_query``; recall embeds its query with them. Without them, queries go through
``embed``.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import InvalidArgumentError

__all__ = ["Embedder", "EmbedderBase", "check_texts", "l2_normalize"]

_MEMBERS = ("model_id", "dimension", "embed", "aembed")
_MISSING = object()


class _StaticProtocolMeta(type(Protocol)):  # type: ignore[misc]
    """Checks protocol members without evaluating them.

    ``isinstance`` on a runtime-checkable protocol reads every member with ``hasattr`` before
    Python 3.12, which would run a lazy ``dimension`` property (a network probe for a remote
    model). Looking the members up statically keeps ``isinstance`` free of side effects.
    """

    def __instancecheck__(cls, obj: object) -> bool:
        if cls is not Embedder:
            return super().__instancecheck__(obj)
        return all(inspect.getattr_static(obj, name, _MISSING) is not _MISSING for name in _MEMBERS)


@runtime_checkable
class Embedder(Protocol, metaclass=_StaticProtocolMeta):
    """Anything that embeds texts: ``model_id``, ``dimension``, ``embed`` and ``aembed``.

    Optional: ``embed_query(texts)`` and ``aembed_query(texts)``, for models that embed
    search queries differently from documents.

    >>> from threadrecall.embedders import HashEmbedder
    >>> isinstance(HashEmbedder(dim=8), Embedder)
    True
    """

    model_id: str

    @property
    def dimension(self) -> int:
        """The length of the vectors."""
        ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` into a ``float32`` array of shape ``(len(texts), dimension)``."""
        ...

    async def aembed(self, texts: list[str]) -> np.ndarray:
        """The async twin of :meth:`embed`."""
        ...


class EmbedderBase:
    """Shared behaviour: ``aembed`` runs ``embed`` in a worker thread.

    Subclasses set ``model_id`` and ``dimension`` (an attribute or a property) and implement
    ``embed``.
    """

    model_id: str

    def embed(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    async def aembed(self, texts: list[str]) -> np.ndarray:
        """Embed without blocking the event loop (the work runs in a worker thread)."""
        return await asyncio.to_thread(self.embed, texts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r}, dimension={getattr(self, 'dimension', None)})"


def check_texts(texts: object) -> list[str]:
    """Return ``texts`` as a list of strings, or raise ``InvalidArgumentError``.

    A bare string is refused: it is almost always a caller who meant ``[text]``.
    """
    if isinstance(texts, (str, bytes)):
        raise InvalidArgumentError("embed() takes a list of texts, not a single string")
    try:
        items = list(texts)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(
            f"embed() takes a list of texts, got {type(texts).__name__}"
        ) from None
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise InvalidArgumentError(
                f"embed() texts must be strings; item {i} is {type(item).__name__}"
            )
    return items


def l2_normalize(matrix: np.ndarray) -> np.ndarray:
    """Scale each row of ``matrix`` to unit length, in place; all-zero rows stay zero."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix
