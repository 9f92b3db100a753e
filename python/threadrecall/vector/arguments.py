"""The argument checks every vector store shares: index names, metrics, counts, vectors."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import DimensionMismatchError, InvalidArgumentError

__all__ = ["METRICS", "NAME", "as_matrix", "check_name", "is_int"]

METRICS = ("cosine", "euclidean", "dotproduct")
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]{0,62}$")


def is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_name(name: Any) -> None:
    if not isinstance(name, str) or not NAME.match(name):
        raise InvalidArgumentError(
            f"index name must be 1-63 letters, digits, '_' or '-', got {name!r}"
        )


def as_matrix(vectors: Any, dimension: int, single: bool = False) -> np.ndarray:
    """A C-contiguous float32 ``(n, dimension)`` array of finite values, or the right error."""
    try:
        arr = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"vectors must be numbers: {exc}") from None
    if single:
        if arr.ndim != 1:
            raise InvalidArgumentError("the query must be one vector (a flat list or 1-d array)")
        arr = arr.reshape(1, -1)
    elif arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, dimension)
    elif arr.ndim != 2:
        raise InvalidArgumentError("vectors must be a list of vectors or a 2-d array")
    if arr.shape[1] != dimension:
        raise DimensionMismatchError(
            f"vector dimension {arr.shape[1]} does not match the index dimension {dimension}"
        )
    if not np.isfinite(arr).all():
        raise InvalidArgumentError("vectors must hold finite numbers")
    return np.ascontiguousarray(arr)
