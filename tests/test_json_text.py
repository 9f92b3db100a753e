"""Stored JSON columns are written by the core exactly as Python's encoder writes them."""

from __future__ import annotations

import json
import math
import random
import re
import struct
from collections import OrderedDict
from datetime import datetime, timezone
from enum import IntEnum

import pytest

from threadrecall import _core
from threadrecall.errors import InvalidArgumentError, UnsupportedValueError
from threadrecall.types import dumps

PYTHON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


class Level(IntEnum):
    HIGH = 3


class Name(str):
    pass


def _nested(depth: int) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


def _random_float(rng: random.Random) -> float:
    kind = rng.randrange(4)
    if kind == 0:  # any bit pattern: every magnitude, subnormals, NaN and infinities
        return struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
    if kind == 1:
        return rng.choice([0.0, -0.0, 1.0, 0.1, 1e15, 1e16, 1e-4, 1e-5, math.inf, -math.inf, math.nan])
    if kind == 2:
        return round(rng.uniform(-1e6, 1e6), rng.randrange(8))
    return rng.uniform(-1, 1) * 10.0 ** rng.randrange(-30, 30)


def _random_text(rng: random.Random) -> str:
    alphabet = ["a", "Z", "0", " ", '"', "\\", "/", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f",
                "é", "日", "\u2028", "🦀", "\U0010ffff"]
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))


def _random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(-10**12, 10**12)])
    if kind == 2:
        return _random_float(rng)
    if kind in (3, 4, 5):
        return _random_text(rng)
    if kind == 6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 7:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    return {_random_text(rng): _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def test_random_values_are_written_by_the_core_as_python_writes_them():
    rng = random.Random(5)
    for _ in range(5000):
        value = _random_value(rng)
        assert _core.compact_json(value) == PYTHON.encode(value), value


@pytest.mark.parametrize("value", [
    {"parts": [{"type": "text", "text": "message 12 about billing"}]},
    {"topic": "billing", "priority": 2, "score": 0.25, "flags": [True, None]},
    {"": "", "nested": {"deep": [[], {}, ()]}},
    Level.HIGH,  # an int subclass is written as its number, as Python does
    Name("a str subclass"),
    {"k": Level.HIGH, Name("key"): Name("v")},
])
def test_common_values_never_need_python(value):
    assert _core.compact_json(value) == PYTHON.encode(value)


@pytest.mark.parametrize("value", [
    2**64,
    -(2**70),
    OrderedDict(a=1),
    _nested(70),  # deeper than the core goes
])
def test_what_only_python_handles_is_left_to_it_with_the_same_result(value):
    assert _core.compact_json(value) is None
    assert dumps(value) == PYTHON.encode(value)


@pytest.mark.parametrize("value, error, names", [
    ({"when": datetime(2024, 1, 1, tzinfo=timezone.utc)}, UnsupportedValueError, "'when'"),
    ({1: "int key"}, UnsupportedValueError, "key 1"),
    ({None: 1, True: 2, 1.5: 3}, UnsupportedValueError, "key None"),
    ({"set": {1, 2}}, UnsupportedValueError, "'set'"),
    ({"raw": b"bytes"}, UnsupportedValueError, "'raw'"),
    ({"obj": [object()]}, UnsupportedValueError, "'obj'[0]"),
    (["\ud800 unpaired surrogate"], InvalidArgumentError, "surrogate"),
])
def test_what_json_cannot_hold_is_refused_naming_its_key(value, error, names):
    assert _core.compact_json(value) is None
    with pytest.raises(error, match=re.escape(names)):
        dumps(value)


def test_a_cycle_is_reported_as_python_reports_it():
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps(cycle)
