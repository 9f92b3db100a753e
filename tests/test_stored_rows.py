"""Stored rows decode into the same Messages through the core as through Python's decoder.

``messages_of`` hands a page's rows to the core, which parses their JSON texts straight into
Python values; what it does not take (a lone surrogate escape, a text that is not JSON) goes
back to ``json.loads``. Either way the Messages must be the ones Python's decoder makes: the
same values of the same types (an int stays an int of any size, a float keeps its bits), the
same key order, the same errors.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from threadrecall import _core
from threadrecall.storage.rows import _KINDS, _decoded, messages_of, payload
from threadrecall.types import Message, MessageContent


def _shape(value):
    """A value with its types spelled out (``1``, ``1.0`` and ``True`` differ; NaN equals NaN)."""
    if isinstance(value, dict):
        return ("dict", [(k, _shape(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_shape(v) for v in value])
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else value.hex())
    return (type(value).__name__, value)


def _described(messages: list[Message]) -> list:
    return [(type(m), type(m.content), sorted(vars(m)), sorted(vars(m.content)), m.id, m.thread_id,
             m.resource_id, m.role, m.type, m.created_at, m.created_at.tzinfo, _shape(m.content.parts),
             _shape(m.content.text), _shape(m.metadata)) for m in messages]


def _rows(content: str, metadata: str) -> list[tuple]:
    return [("m1", "t1", None, 1_700_000_000_123_456, 1, "user", "text", content, metadata),
            ("m2", "t1", "r1", -5, 2, payload("assistant", "tool", content, metadata))]


TEXTS = [
    "{}", '{"parts":[]}', '{"parts":null,"text":null}', '{"parts":[],"text":""}', '{"parts":{}}', '{"parts":0}',
    '{"parts":[{"type":"text","text":"h\\u00e9 \\ud83d\\ude00 \\n\\t\\"\\\\\\/ \\b\\f\\r"}],"text":"caf\u00e9"}',
    '{"a":1,"b":2,"a":3}',
    '{"n":[0,-0,1.5,-2e10,1E+3,1e400,-1e400,5e-324,123456789012345678901234567890,'
    '-9223372036854775808,9223372036854775807,9223372036854775808,18446744073709551616]}',
    '{"x":NaN,"y":Infinity,"z":-Infinity}', ' { "s" : [ true , false , null ] } \n',
    '{"deep":' + "[" * 100 + "]" * 100 + "}", '{"u":"\\u0000\\u001f\\u2028"}',
]
# Texts the core leaves to Python: a lone surrogate (Python's decoder keeps it), deep nesting.
LEFT = ['{"s":"\\ud800"}', '{"s":"\\udc00x"}', '{"s":"\\ud800\\u0041"}', '{"d":' + "[" * 300 + "]" * 300 + "}"]
# Not JSON: the same error as json.loads.
BAD = ['{"a":1,}', "[1,]", '{"a":01}', '{"a":1.}', "nul", '{"a":"\x01"}', '{"a":1} x', '{"a":-}', '{"a":.5}',
       '{"a"}', "", '{"a":"x', '{"a":"\\x"}', '{"a":"\\u12"}', "-Infinit"]


@pytest.mark.parametrize("content", TEXTS)
@pytest.mark.parametrize("metadata", ["{}", '{"topic":"books","priority":2}', *TEXTS[6:]])
def test_the_core_decodes_as_python_does(content: str, metadata: str) -> None:
    rows = _rows(content, metadata)
    decoded = _core.stored_messages(rows, _KINDS)
    assert decoded is not None
    assert _described(decoded) == _described(_decoded(rows))


def test_nan_and_the_infinities_are_the_objects_pythons_decoder_gives() -> None:
    # json.loads returns one NaN object, so decoded metadata holding NaN compares equal.
    text = '{"x":NaN,"y":Infinity,"z":-Infinity}'
    (first, _), (second, _) = (_core.stored_messages(_rows("{}", text), _KINDS) for _ in range(2))
    assert first.metadata == second.metadata == _decoded(_rows("{}", text))[0].metadata
    assert [first.metadata[k] for k in "xyz"] == [v for v in json.loads(text).values()]


@pytest.mark.parametrize("text", LEFT)
def test_what_the_core_leaves_to_python_decodes_there(text: str) -> None:
    rows = _rows('{"parts":[]}', text)
    assert _core.stored_messages(rows, _KINDS) is None
    assert _described(messages_of(rows)) == _described(_decoded(rows))
    assert messages_of(rows)[0].metadata == json.loads(text)


@pytest.mark.parametrize("text", BAD)
def test_a_text_that_is_not_json_raises_as_json_loads_does(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    for rows in (_rows(text, "{}"), _rows('{"parts":[]}', text)):
        assert _core.stored_messages(rows, _KINDS) is None
        with pytest.raises(json.JSONDecodeError):
            messages_of(rows)


def test_rows_in_other_containers_go_to_python() -> None:
    rows = _rows('{"parts":[]}', "{}")
    assert _core.stored_messages(tuple(rows), _KINDS) is None
    assert _core.stored_messages([list(rows[0])], _KINDS) is None
    assert _described(messages_of(tuple(rows))) == _described(_decoded(rows))


def test_a_payload_without_its_keys_raises_as_before() -> None:
    rows = [("m1", "t1", None, 0, 1, '{"role":"user","type":"text","content":{"parts":[]}}')]
    assert _core.stored_messages(rows, _KINDS) is None
    with pytest.raises(KeyError):
        messages_of(rows)


# Times around the days-to-date arithmetic's edges: the epoch, leap days, centuries, and the
# first and last microsecond ``datetime`` holds.
TIMES = [0, -1, 1, -86_400_000_000, 86_399_999_999, 951_782_400_000_000, 951_868_799_999_999,
         -2_208_988_800_000_000, 4_107_542_400_000_000, 946_684_799_999_999, 1_700_000_000_123_456,
         -62_135_596_800_000_000, 253_402_300_799_999_999]
# Beyond it: the same OverflowError as Python's ``epoch + timedelta``, also past 64 bits.
OUT_OF_RANGE = [-62_135_596_800_000_001, 253_402_300_800_000_000, 2**63 - 1, -(2**63), 2**70]


@pytest.mark.parametrize("micros", TIMES)
def test_times_are_the_ones_pythons_decoder_makes(micros: int) -> None:
    rows = [("m1", "t1", None, micros, 1, "user", "text", "{}", "{}")]
    (decoded,) = _core.stored_messages(rows, _KINDS)
    (expected,) = _decoded(rows)
    assert decoded.created_at == expected.created_at
    assert decoded.created_at.tzinfo is expected.created_at.tzinfo is timezone.utc
    assert decoded.created_at.fold == 0 and type(decoded.created_at) is datetime


@given(st.integers(min_value=-62_135_596_800_000_000, max_value=253_402_300_799_999_999))
@seed(12)
@settings(max_examples=300, deadline=None)
def test_any_time_datetime_holds_decodes_as_python_does(micros: int) -> None:
    rows = [("m1", "t1", None, micros, 1, "user", "text", "{}", "{}")]
    assert _core.stored_messages(rows, _KINDS)[0].created_at == _decoded(rows)[0].created_at


@pytest.mark.parametrize("micros", OUT_OF_RANGE)
def test_a_time_datetime_cannot_hold_raises_as_python_does(micros: int) -> None:
    rows = [("m1", "t1", None, micros, 1, "user", "text", "{}", "{}")]
    with pytest.raises(OverflowError):
        _decoded(rows)
    with pytest.raises(OverflowError):
        _core.stored_messages(rows, _KINDS)


def test_messages_compare_equal_to_constructed_ones() -> None:
    made = Message(id="m1", thread_id="t1", resource_id=None, role="user",
                   content=MessageContent(parts=[{"type": "text", "text": "hi"}]),
                   created_at=datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=timezone.utc),
                   metadata={"k": [1, 2.5]})
    (decoded,) = messages_of([("m1", "t1", None, 1_700_000_000_123_456, 1, "user", "text",
                               json.dumps(made.content.to_dict()), '{"k":[1,2.5]}')])
    assert decoded == made


_scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-2**130, max_value=2**130)
            | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=20)


@seed(17)
@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.dictionaries(st.text(max_size=6), _values, max_size=3), max_size=3),
       text=st.none() | st.text(max_size=20), metadata=st.dictionaries(st.text(max_size=8), _values, max_size=5),
       ascii=st.booleans(), spaced=st.booleans())
def test_any_stored_json_decodes_as_python_does(parts, text, metadata, ascii: bool, spaced: bool) -> None:
    separators = (", ", ": ") if spaced else (",", ":")
    try:
        content = json.dumps({"parts": parts, "text": text}, ensure_ascii=ascii, separators=separators)
        meta = json.dumps(metadata, ensure_ascii=ascii, separators=separators)
    except ValueError:  # an int too long for Python's int-to-text conversion
        return
    rows = _rows(content, meta)
    assert _described(messages_of(rows)) == _described(_decoded(rows))
