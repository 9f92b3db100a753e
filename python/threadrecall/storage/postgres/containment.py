"""Shallow metadata filters as JSONB containment.

Each stored message (and thread) keeps, beside its exact metadata text, a JSONB "filter form":
its top-level keys with every value rewritten so that JSONB equality is the filter's equality.
A filter, rewritten the same way, matches exactly the rows whose form contains it
(``form @> filter``), which an index can serve.

The rewriting of a value:
- ``None``, booleans and strings stay themselves (a boolean never equals a number in JSONB);
  a string PostgreSQL cannot hold in JSONB (with NUL, or unpaired surrogates, which the core
  reads as U+FFFD) becomes ``{"z": <hex of its UTF-8>}``.
- A number becomes its exact value, so that JSONB's numeric equality is exact comparison:
  integers as they are, floats as the exact decimal of their binary value (``0.1`` is
  ``0.1000000000000000055511151231257827021181583404541015625``). For messages, integers
  beyond 64 bits are first rounded to a float, as the core's timeline reads them; thread
  filters compare them exactly.
- Anything else (lists, mappings, NaN, infinities, other types) becomes ``{}``: present, equal
  to nothing, as a filter value never rewrites to ``{}``.

Keys no filter can name (filters take ``^[a-zA-Z_][a-zA-Z0-9_]*$``, at most 128 characters)
are left out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ...types import dumps

__all__ = ["filter_form", "filter_value"]

_I64 = range(-(2**63), 2**63)
_OTHER = "{}"
_KEY = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,127}")


def filter_form(metadata: Mapping[str, Any] | None, *, exact_integers: bool = False) -> str | None:
    """The JSONB text of ``metadata``'s filter form; ``None`` when it has no keys.

    >>> filter_form({"n": 1, "r": 0.5, "tag": "a", "x": [1], "ok": True, "not a key": 1})
    '{"n":1,"r":0.5,"tag":"a","x":{},"ok":true}'
    """
    if not metadata:
        return None
    parts = [f'"{k}":{_value(v, exact_integers)}' for k, v in metadata.items()
             if isinstance(k, str) and _KEY.fullmatch(k)]
    return "{" + ",".join(parts) + "}" if parts else None


def filter_value(metadata: Mapping[str, Any], *, exact_integers: bool = False) -> str:
    """The JSONB text of an already validated filter (``{}`` for no condition).

    >>> filter_value({"n": 1.0, "flag": None})
    '{"n":1,"flag":null}'
    """
    return filter_form(metadata, exact_integers=exact_integers) or "{}"


def _value(value: Any, exact_integers: bool) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int):
        value = int(value)
        if exact_integers or value in _I64:
            return str(value)
        try:
            value = float(value)
        except OverflowError:
            return _OTHER
    if isinstance(value, float):
        return _number(float(value))
    return _OTHER


def _number(value: float) -> str:
    if not math.isfinite(value):
        return _OTHER
    if value.is_integer():
        return str(int(value))
    return format(Decimal(value), "f")


def _string(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # unpaired surrogates: the core reads them as U+FFFD
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if "\x00" in text:
        return '{"z":"' + text.encode("utf-8").hex() + '"}'
    return dumps(text)
