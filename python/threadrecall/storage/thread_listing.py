"""The rules of ``list_threads`` that every backend shares: paging and ordering arguments."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import is_count
from ..errors import InvalidArgumentError

__all__ = ["check_thread_paging", "thread_order"]


def check_thread_paging(page: Any, per_page: Any) -> None:
    """``page`` counts from 0; ``per_page`` is a count, or ``False`` (every thread, page 0).

    >>> check_thread_paging(0, False)
    """
    if not is_count(page):
        raise InvalidArgumentError("page must be >= 0")
    if per_page is not False and not is_count(per_page):
        raise InvalidArgumentError("perPage must be >= 0")
    if per_page is False and page != 0:
        raise InvalidArgumentError("page must be 0 when perPage is false")


def thread_order(order_by: Mapping[str, str] | None) -> tuple[str, str]:
    """The ``(column, direction)`` of an ``order_by``: newest created first by default.

    >>> thread_order({"field": "updated_at", "direction": "asc"})
    ('updated_at', 'ASC')
    """
    order_by = order_by or {}
    field = order_by.get("field", "created_at")
    direction = str(order_by.get("direction", "DESC")).upper()
    if field not in ("created_at", "updated_at"):
        raise InvalidArgumentError(f"order_by.field must be 'created_at' or 'updated_at', got {field!r}")
    if direction not in ("ASC", "DESC"):
        raise InvalidArgumentError(f"order_by.direction must be 'ASC' or 'DESC', got {direction!r}")
    return field, direction
