"""Extractor construction, slugs, metadata paths, inline parsing and prompt sections."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel
from threadrecall.errors import ExtractorError
from threadrecall.extractors import (
    RESERVED_SLUGS,
    Extractor,
    ExtractorContext,
    parse_inline_values,
    resolve_extractors,
    slugify_extractor_name,
    structured_request,
)
from threadrecall.models import ScriptedModel
from threadrecall.summarize import summarize_conversation

CTX = ExtractorContext("observer", "t1", "r1")
OBS = "<observations>\n* 🔴 (09:30) note\n</observations>"


def resolved(*extractors):
    return resolve_extractors(extractors, CTX)


# --------------------------------------------------------------------------- 113-118

def test_defaults():
    e = Extractor("Project Status", instructions="Where the project stands.")
    assert e.slug == "project-status"
    assert e.mode == "inline"
    assert e.include_previous_extraction is True
    assert e.metadata_key_path == "extracted.project-status"


def test_schema_means_structured():
    class Status(BaseModel):
        phase: str

    assert Extractor("status", instructions="s", schema=Status).mode == "structured"
    assert Extractor("status", instructions="s", schema={"type": "string"}).mode == "structured"
    assert Extractor("status", instructions="s", schema=int, mode="inline").mode == "inline"


@pytest.mark.parametrize("name, slug", [
    ("---Project---Status---", "project-status"),
    ("  Project   Status  ", "project-status"),
    ("Project_Status!!", "project-status"),
    ("User's \"Mood\"", "users-mood"),
    ("Étape 2", "tape-2"),
])
def test_slugs(name, slug):
    assert slugify_extractor_name(name) == slug


def test_metadata_key_path_routing():
    title = Extractor("Title", instructions="t", metadata_key_path="threadTitle")
    priority = Extractor("Priority", instructions="p")
    hidden = Extractor("Secret", instructions="s", metadata_key_path=False)
    meta = {"extracted": {"other": 1}, "keep": True}
    assert title.write_to(meta, "Leaking tap") == {**meta, "threadTitle": "Leaking tap"}
    assert priority.metadata_key_path == "extracted.priority"
    assert priority.write_to(meta, "high") == {"extracted": {"other": 1, "priority": "high"},
                                               "keep": True}
    assert meta == {"extracted": {"other": 1}, "keep": True}  # input untouched
    assert hidden.metadata_key_path is False and hidden.write_to(meta, "x") == meta


@pytest.mark.parametrize("path", ["__proto__.polluted", "a.constructor", "prototype",
                                  "a..b", ""])
def test_unsafe_metadata_paths(path):
    with pytest.raises(ExtractorError, match="path segment|dotted path"):
        Extractor("x", instructions="x", metadata_key_path=path)
    assert not hasattr(object, "polluted") and "polluted" not in dir({})


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "!!!", "instructions": "x"}, "non-empty slug"),
    ({"name": "", "instructions": "x"}, "Extractor name is required."),
    ({"name": None, "instructions": "x"}, "Extractor name is required."),
    ({"name": "Current Task", "instructions": "x"}, 'slug "current-task" is reserved'),
    ({"name": "2nd place", "instructions": "x"}, "invalid slug"),
    ({"name": "Mood"}, 'Extractor "Mood" must include instructions.'),
    ({"name": "Mood", "instructions": "   "}, "must include instructions"),
    ({"name": "Mood", "mode": "hook"}, "on_extracted"),
    ({"name": "Mood", "instructions": "x", "mode": "structured"}, "schema"),
    ({"name": "Mood", "instructions": "x", "mode": "sometimes"}, "unknown mode"),
    ({"name": "Mood", "instructions": "x", "schema": object()}, "unusable schema"),
])
def test_invalid_extractors(kwargs, message):
    with pytest.raises(ExtractorError, match=message.replace("(", r"\(")):
        Extractor(**kwargs)


def test_reserved_slugs_all_rejected():
    for slug in RESERVED_SLUGS:
        with pytest.raises(ExtractorError, match="reserved"):
            Extractor(slug.replace("-", " "), instructions="x")


def test_duplicate_slugs():
    with pytest.raises(ExtractorError,
                       match='Duplicate extractor slug "priority" from "Priority" and "Priority"'):
        resolved(Extractor("Priority", instructions="a"), Extractor("Priority", instructions="b"))


def test_hook_extractor_needs_neither_instructions_nor_schema():
    e = Extractor("audit", mode="hook", on_extracted=lambda ctx: None)
    assert e.mode == "hook"


# --------------------------------------------------------------------------- 119-124

def test_combined_extracted_values_block():
    mood = Extractor("mood", instructions="m")
    count = Extractor("count", instructions="n", mode="inline", schema={"type": "integer"})
    text = OBS + '\n<extracted-values>{"mood": "calm", "count": 3, "other": "x", "count2": ""}' \
                 '</extracted-values>'
    parsed = parse_inline_values(text, resolved(mood, count))
    assert parsed.values == {"mood": "calm", "count": 3}
    assert parsed.failures == []
    assert parsed.text == OBS


def test_extracted_values_block_that_is_not_an_object():
    parsed = parse_inline_values(OBS + "<extracted-values>[1, 2]</extracted-values>",
                                 resolved(Extractor("mood", instructions="m")))
    assert parsed.failures == [{"slug": "extracted-values",
                                "error": "the <extracted-values> block is not a JSON object"}]


def test_placeholder_block_is_ignored():
    text = OBS + ("<extracted-values>Write only the extracted values JSON object here."
                  "</extracted-values>")
    parsed = parse_inline_values(text, resolved(Extractor("mood", instructions="m")))
    assert parsed.values == {} and parsed.failures == []


def test_legacy_section_tags():
    info = Extractor("User Info", instructions="who the user is")
    text = OBS + "\n<user-info>\nName: Ana, lives in Lyon\n</user-info>"
    parsed = parse_inline_values(text, resolved(info))
    assert parsed.values == {"user-info": "Name: Ana, lives in Lyon"}


def test_last_section_wins():
    text = OBS + "<mood>angry</mood>\n<mood>calm</mood>"
    parsed = parse_inline_values(text, resolved(Extractor("mood", instructions="m")))
    assert parsed.values == {"mood": "calm"}


def test_structured_extractors_are_not_read_inline():
    owner = Extractor("owner", instructions="o", schema={"type": "string"})
    text = OBS + '<owner>Ana</owner><extracted-values>{"owner": "Bo"}</extracted-values>'
    parsed = parse_inline_values(text, resolved(owner))
    assert parsed.values == {}
    assert "<owner>Ana</owner>" in parsed.text  # not its section to strip


def test_sections_are_stripped_from_the_summary():
    mood = Extractor("mood", instructions="m")
    model = ScriptedModel(["<observations>\n* note one\n<mood>calm</mood>\n* note two\n"
                           "</observations>\n<mood>calm</mood>"])
    result = summarize_conversation([{"role": "user", "content": "hi"}], model, extract=[mood])
    assert result.summary == "* note one\n* note two"
    assert "mood" not in result.summary and result.extracted == {"mood": "calm"}


@pytest.mark.parametrize("body, expected", [("7", 7), (" 7 ", 7), ("7.0", 7.0)])
def test_json_first_parsing(body, expected):
    n = Extractor("n", instructions="n", mode="inline", schema={"type": "number"})
    parsed = parse_inline_values(f"<n>{body}</n>", resolved(n))
    assert parsed.values == {"n": expected}


def test_json_first_falls_back_to_the_string_then_fails():
    n = Extractor("n", instructions="n", mode="inline", schema={"type": "number"})
    parsed = parse_inline_values("<n>seven</n>", resolved(n))
    assert parsed.values == {}
    (failure,) = parsed.failures
    assert failure["slug"] == "n" and "did not match" in failure["error"]
    text = Extractor("code", instructions="c")  # a string extractor keeps "123" as text
    assert parse_inline_values("<code>123</code>", resolved(text)).values == {"code": "123"}


def test_prior_values_only_for_opted_in_extractors_with_values():
    a = Extractor("alpha", instructions="a", schema={"type": "string"})
    b = Extractor("beta", instructions="b", schema={"type": "string"},
                  include_previous_extraction=False)
    c = Extractor("gamma", instructions="c", schema={"type": "string"})
    prompt, schema = structured_request(resolved(a, b, c), {"alpha": "A", "beta": "B", "gamma": ""})
    assert "## Prior Extracted Values\n- alpha: \"A\"" in prompt
    assert "beta: \"B\"" not in prompt and "- gamma: \"" not in prompt
    assert schema["properties"] == {s: {"type": "string"} for s in ("alpha", "beta", "gamma")}
    prompt, _ = structured_request(resolved(a), {})
    assert "Prior Extracted Values" not in prompt


def test_pydantic_definitions_are_hoisted():
    class Item(BaseModel):
        name: str

    class Order(BaseModel):
        items: list[Item]

    order = Extractor("order", instructions="o", schema=Order)
    _, schema = structured_request(resolved(order))
    assert "Item" in schema["$defs"]
    assert "$defs" not in schema["properties"]["order"]


# --------------------------------------------------------------------------- 125-126

def test_dynamic_instructions_and_schema():
    seen = []

    def instructions(ctx):
        seen.append(ctx)
        return f"Priority for {ctx.resource_id}"

    def schema(ctx):
        return {"type": "integer"} if ctx.thread_id == "t1" else None

    e = Extractor("priority", instructions=instructions, schema=schema)
    (r,) = resolved(e)
    assert r.instructions == "Priority for r1" and r.mode == "structured"
    assert r.check(3) == 3
    assert seen[0].source == "observer" and seen[0].thread_id == "t1"
    (other,) = resolve_extractors([e], ExtractorContext("observer", "t2", "r1"))
    assert other.mode == "inline"


def test_hooks_receive_memory_and_request_context():
    seen = []
    e = Extractor("mood", instructions="m", on_extracted=seen.append)
    memory, request = object(), {"user": "ana"}
    summarize_conversation([{"role": "user", "content": "hi"}],
                           ScriptedModel([OBS + "<mood>calm</mood>"]), extract=[e],
                           memory=memory, request_context=request)
    assert seen[0].memory is memory and seen[0].request_context is request


def test_dynamic_context_receives_memory():
    seen = []
    e = Extractor("mood", instructions=lambda ctx: seen.append(ctx.memory) or "m")
    memory = object()
    summarize_conversation([{"role": "user", "content": "hi"}], ScriptedModel([OBS]),
                           extract=[e], memory=memory)
    assert seen == [memory]


# --------------------------------------------------------------------------- schema checks

ADDRESS = {
    "type": "object",
    "properties": {
        "street": {"type": "string", "minLength": 1},
        "kind": {"enum": ["home", "work"]},
        "floor": {"type": ["integer", "null"], "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "geo": {"$ref": "#/$defs/Geo"},
        "id": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    },
    "required": ["street"],
    "additionalProperties": False,
    "$defs": {"Geo": {"type": "object", "properties": {"lat": {"type": "number"}},
                      "required": ["lat"]}},
}


@pytest.mark.parametrize("value, problem", [
    ({"street": "Main"}, None),
    ({"street": "Main", "kind": "home", "floor": None, "tags": ["a"], "geo": {"lat": 1.5},
      "id": 7}, None),
    ({}, "missing required property 'street'"),
    ({"street": ""}, "shorter than 1"),
    ({"street": "x", "kind": "boat"}, "is not one of"),
    ({"street": "x", "floor": -1}, "violates minimum"),
    ({"street": "x", "floor": 1.5}, "expected integer or null"),
    ({"street": "x", "floor": True}, "expected integer or null"),
    ({"street": "x", "tags": ["a", "b", "c"]}, "more than 2 items"),
    ({"street": "x", "tags": [1]}, "value.tags[0]: expected string"),
    ({"street": "x", "geo": {}}, "value.geo: missing required property 'lat'"),
    ({"street": "x", "id": [1]}, "does not match any"),
    ({"street": "x", "color": "red"}, "value.color: not allowed"),
    ("Main street", "expected object"),
])
def test_json_schema_checks(value, problem):
    from threadrecall.value_schema import SchemaMismatch, ValueSchema

    schema = ValueSchema(ADDRESS)
    if problem is None:
        assert schema.validate(value) == value
    else:
        with pytest.raises(SchemaMismatch, match=re.escape(problem)):
            schema.validate(value)


def test_pydantic_schemas_return_models_and_dump_json():
    from threadrecall.value_schema import SchemaMismatch, ValueSchema

    class Point(BaseModel):
        x: int
        y: int = 0

    schema = ValueSchema(Point)
    assert schema.is_model and schema.validate({"x": "3"}) == Point(x=3)
    assert schema.dump(Point(x=3)) == {"x": 3, "y": 0}
    with pytest.raises(SchemaMismatch, match="x"):
        schema.validate({"y": 1})
    assert ValueSchema(list[str]).validate(["a"]) == ["a"]
