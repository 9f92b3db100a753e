"""Working memory over a real DuckDB file: guards, scopes, merge, template, stripping."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone

import pytest
from pydantic import BaseModel
from threadrecall.errors import (
    ConfigurationError,
    InvalidArgumentError,
    ResourceMismatchError,
    ThreadNotFoundError,
)
from threadrecall.types import Message, MessageContent, Thread
from threadrecall.working_memory import (
    THREAD_METADATA_KEY,
    WorkingMemory,
    deep_merge,
    strip_working_memory,
)

NOW = datetime(2026, 1, 5, 9, 30, tzinfo=timezone.utc)


# `storage` (conftest.py) is a DuckDBStorage on a file in tmp_path.

def thread(storage, thread_id="t1", resource_id="r1"):
    return storage.save_thread(Thread(thread_id, resource_id, "", {}, NOW, NOW))


class Profile(BaseModel):
    name: str | None = None
    tone: str | None = None
    tags: list[str] = []


# --------------------------------------------------------------------------- guards

def test_disabled_working_memory(storage):
    wm = WorkingMemory(storage)
    assert wm.template() is None
    assert wm.system_message("t1", resource_id="r1") is None
    for call in (lambda: wm.get("t1", resource_id="r1"),
                 lambda: wm.update("t1", "x", resource_id="r1"),
                 lambda: wm.merge("t1", {}, resource_id="r1")):
        with pytest.raises(ConfigurationError, match="not enabled"):
            call()


def test_resource_scope_needs_a_resource_id(storage):
    wm = WorkingMemory(storage, {"enabled": True})
    with pytest.raises(ConfigurationError, match="no resource_id was provided"):
        wm.get("t1")


def test_other_resource_is_refused(storage):
    thread(storage)
    wm = WorkingMemory(storage, {"enabled": True})
    with pytest.raises(ResourceMismatchError,
                       match="Thread with id t1 is for resource with id r1 but resource r2"):
        wm.update("t1", "x", resource_id="r2")


def test_bad_arguments(storage):
    wm = WorkingMemory(storage, {"enabled": True, "schema": Profile})
    with pytest.raises(InvalidArgumentError):
        wm.get("  ", resource_id="r1")
    with pytest.raises(InvalidArgumentError, match="JSON object"):
        wm.merge("t1", ["a"], resource_id="r1")
    with pytest.raises(InvalidArgumentError, match="Failed to parse working memory input"):
        wm.merge("t1", "{nope", resource_id="r1")
    with pytest.raises(InvalidArgumentError):
        WorkingMemory(storage, {"enabled": True}).update("t1", 42, resource_id="r1")


# --------------------------------------------------------------------------- scopes

def test_resource_scope_round_trip_is_shared_across_threads(storage):
    thread(storage, "t1")
    thread(storage, "t2")
    wm = WorkingMemory(storage, {"enabled": True})
    assert wm.get("t1", resource_id="r1") is None
    wm.update("t1", "# User Information\n- **First Name**: Ana", resource_id="r1")
    assert wm.get("t2", resource_id="r1") == "# User Information\n- **First Name**: Ana"
    assert storage.get_resource("r1").working_memory.endswith("Ana")
    assert THREAD_METADATA_KEY not in storage.get_thread("t1").metadata


def test_thread_scope_lives_in_thread_metadata(storage):
    thread(storage, "t1")
    thread(storage, "t2")
    wm = WorkingMemory(storage, {"enabled": True, "scope": "thread"})
    wm.update("t1", "notes for t1")
    assert wm.get("t1") == "notes for t1"
    assert wm.get("t2") is None
    assert storage.get_thread("t1").metadata[THREAD_METADATA_KEY] == "notes for t1"
    assert wm.get("missing") is None
    with pytest.raises(ThreadNotFoundError, match="Thread missing not found"):
        wm.update("missing", "x")


def test_blank_memory_reads_as_none(storage):
    wm = WorkingMemory(storage, {"enabled": True})
    wm.update("t1", "   ", resource_id="r1")
    assert wm.get("t1", resource_id="r1") is None


# --------------------------------------------------------------------------- merge

def test_merge_adds_deletes_and_replaces_lists(storage):
    wm = WorkingMemory(storage, {"enabled": True, "schema": Profile})
    assert wm.merge("t1", {"name": "A", "tags": ["x", "y"]}, resource_id="r1") == \
        {"name": "A", "tags": ["x", "y"]}
    assert wm.merge("t1", {"tone": "warm", "tags": ["z"]}, resource_id="r1") == \
        {"name": "A", "tone": "warm", "tags": ["z"]}
    assert wm.merge("t1", '{"name": null}', resource_id="r1") == {"tone": "warm", "tags": ["z"]}
    assert json.loads(wm.get("t1", resource_id="r1")) == {"tone": "warm", "tags": ["z"]}


def test_merge_replaces_a_stored_non_object(storage):
    wm = WorkingMemory(storage, {"enabled": True, "schema": Profile})
    wm.update("t1", "plain text from before", resource_id="r1")
    assert wm.merge("t1", {"name": "B"}, resource_id="r1") == {"name": "B"}


def test_merge_needs_schema_mode(storage):
    wm = WorkingMemory(storage, {"enabled": True})
    with pytest.raises(ConfigurationError, match="schema"):
        wm.merge("t1", {"a": 1}, resource_id="r1")


def test_merge_in_thread_scope(storage):
    thread(storage)
    wm = WorkingMemory(storage, {"enabled": True, "scope": "thread", "schema": Profile})
    wm.merge("t1", {"name": "A"})
    assert wm.merge("t1", {"tone": "dry"}) == {"name": "A", "tone": "dry"}


def test_deep_merge_nested_nulls():
    base = {"a": {"b": {"c": 1, "d": 2}}, "e": 1}
    assert deep_merge(base, {"a": {"b": {"c": None}}, "f": {"g": None, "h": 1}}) == \
        {"a": {"b": {"d": 2}}, "e": 1, "f": {"h": 1}}
    assert base == {"a": {"b": {"c": 1, "d": 2}}, "e": 1}


def test_concurrent_merges_lose_no_key(storage):
    """8 Python threads merge distinct keys into one resource's memory at once."""
    wm = WorkingMemory(storage, {"enabled": True, "schema": {"type": "object"}})
    start = threading.Barrier(8)
    errors = []

    def worker(n):
        try:
            start.wait()
            for i in range(10):
                wm.merge("t1", {f"k{n}_{i}": i, "shared": {f"w{n}": i}}, resource_id="r1")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    final = json.loads(wm.get("t1", resource_id="r1"))
    assert {k for k in final if k != "shared"} == {f"k{n}_{i}" for n in range(8) for i in range(10)}
    assert final["shared"] == {f"w{n}": 9 for n in range(8)}


# --------------------------------------------------------------------------- tool update

def test_tool_update_refuses_an_empty_template_over_real_data(storage):
    wm = WorkingMemory(storage, {"enabled": True})
    template = wm.template()["content"]
    assert wm.apply_tool_update("t1", template, resource_id="r1")["success"] is True
    wm.update("t1", template.replace("**First Name**: ", "**First Name**: Ana"), resource_id="r1")
    outcome = wm.apply_tool_update("t1", "  " + template.replace("\n", " \n"), resource_id="r1")
    assert outcome == {"success": False, "message": "Attempted to replace existing working "
                       "memory with empty template. Update skipped to prevent data loss."}
    assert "Ana" in wm.get("t1", resource_id="r1")


def test_tool_update_merges_in_schema_mode(storage):
    wm = WorkingMemory(storage, {"enabled": True, "schema": Profile})
    wm.apply_tool_update("t1", {"name": "A"}, resource_id="r1")
    wm.apply_tool_update("t1", '{"tone": "warm"}', resource_id="r1")
    assert json.loads(wm.get("t1", resource_id="r1")) == {"name": "A", "tone": "warm"}


# --------------------------------------------------------------------------- template, message

def test_default_markdown_template_and_system_message(storage):
    wm = WorkingMemory(storage, {"enabled": True})
    template = wm.template()
    assert template["format"] == "markdown"
    fields = ["First Name", "Last Name", "Location", "Occupation", "Interests", "Goals",
              "Events", "Facts", "Projects"]
    assert template["content"].splitlines() == ["# User Information"] + \
        [f"- **{f}**:" if f == "Projects" else f"- **{f}**: " for f in fields]
    wm.update("t1", "# User Information\n- **First Name**: Ana", resource_id="r1")
    message = wm.system_message("t1", resource_id="r1")
    assert "<working_memory_template>\n# User Information" in message
    assert all(f"**{f}**" in message for f in fields)
    data = "# User Information\n- **First Name**: Ana"
    assert f"<working_memory_data>\n{data}\n</working_memory_data>" in message
    assert "updateWorkingMemory" in message
    read_only = wm.system_message("t1", resource_id="r1", read_only=True)
    assert "read-only" in read_only and "updateWorkingMemory" not in read_only
    assert "Ana" in read_only


def test_custom_template_is_trimmed(storage):
    wm = WorkingMemory(storage, {"enabled": True, "template": "\n# Facts\n- likes:\n\n"})
    assert wm.template() == {"format": "markdown", "content": "# Facts\n- likes:"}


def test_schema_template_is_json(storage):
    wm = WorkingMemory(storage, {"enabled": True, "schema": Profile})
    template = wm.template()
    assert template["format"] == "json"
    assert set(json.loads(template["content"])["properties"]) == {"name", "tone", "tags"}
    message = wm.system_message("t1", resource_id="r1")
    assert '"name": null' in message and '"tags": []' in message
    json_schema = WorkingMemory(storage, {"enabled": True, "schema": {
        "type": "object", "properties": {"city": {"type": "string"}}}})
    assert '"city": ""' in json_schema.system_message("t1", resource_id="r1")


# --------------------------------------------------------------------------- stripping

def message(parts=(), text=None, role="assistant"):
    return Message("m1", "t1", "r1", role, MessageContent(tuple(parts), text), NOW)


def test_tags_are_stripped_from_text_parts():
    m = message([{"type": "text", "text": "Hello <working_memory>secret</working_memory> world"}])
    assert strip_working_memory(m).content.parts == [{"type": "text", "text": "Hello  world"}]


def test_update_tool_parts_are_removed_and_empty_messages_dropped():
    tool = {"type": "tool-invocation", "tool_invocation": {"tool_name": "updateWorkingMemory",
                                                           "args": {"memory": "x"}}}
    other = {"type": "tool-invocation", "tool_invocation": {"toolName": "weather"}}
    assert strip_working_memory(message([tool])) is None
    kept = strip_working_memory(message([tool, other, {"type": "text", "text": "Hello John!"}]))
    assert kept.content.parts == [other, {"type": "text", "text": "Hello John!"}]
    only_tags = message([{"type": "text", "text": "<working_memory>a</working_memory>"}])
    assert strip_working_memory(only_tags) is None


def test_text_field_is_stripped_too():
    m = message([], text="Hi <working_memory>x</working_memory>")
    assert strip_working_memory(m).content.text == "Hi"
    assert strip_working_memory(message([], text="<working_memory>x</working_memory>")) is None


def test_messages_without_working_memory_pass_unchanged():
    m = message([{"type": "text", "text": "plain"}, {"type": "file", "data": "…"},
                 {"type": "custom-thing", "x": 1}])
    assert strip_working_memory(m) is m
    legacy = message([], text="legacy string content")
    assert strip_working_memory(legacy) is legacy


def test_recalled_assistant_message_keeps_its_text():
    m = message([{"type": "text", "text": "<working_memory># User\n- Name: John</working_memory>"
                                          "Hello John!"}])
    stripped = strip_working_memory(m)
    assert stripped.text == "Hello John!" and "<working_memory>" not in stripped.text


# --------------------------------------------------------------------------- through Memory

def test_memory_working_memory_methods(tmp_path):
    import asyncio

    from threadrecall import Memory, MemoryConfig, WorkingMemoryConfig

    memory = Memory(options=MemoryConfig(working_memory=WorkingMemoryConfig(
        enabled=True, schema=Profile)))
    memory.create_thread("r1", thread_id="t1")
    assert memory.get_working_memory_template()["format"] == "json"
    assert memory.merge_working_memory("t1", {"name": "A"}, resource_id="r1") == {"name": "A"}
    assert asyncio.run(memory.amerge_working_memory("t1", {"tone": "warm"}, resource_id="r1")) \
        == {"name": "A", "tone": "warm"}
    assert json.loads(memory.get_working_memory("t1", resource_id="r1")) == \
        {"name": "A", "tone": "warm"}
    memory.update_working_memory("t1", '{"name": "B"}', resource_id="r1")
    assert asyncio.run(memory.aget_working_memory("t1", resource_id="r1")) == '{"name": "B"}'
    with pytest.raises(ConfigurationError):
        memory.get_working_memory("t1")

    plain = Memory()
    assert plain.get_working_memory_template() is None
    assert asyncio.run(plain.aget_working_memory_template()) is None
    with pytest.raises(ConfigurationError, match="not enabled"):
        plain.update_working_memory("t1", "x", resource_id="r1")


def test_saved_messages_lose_their_working_memory_data():
    from threadrecall import Memory

    memory = Memory()
    memory.create_thread("r1", thread_id="t1")
    tool = {"type": "tool-invocation", "tool_invocation": {
        "tool_name": "updateWorkingMemory", "args": {"memory": "# User\n- Name: John"}}}
    saved = memory.save_messages([
        {"id": "a", "thread_id": "t1", "role": "assistant", "content": {"parts": [
            {"type": "text", "text": "<working_memory># User\n- Name: John</working_memory>"
                                     "Hello John!"}]}},
        {"id": "b", "thread_id": "t1", "role": "assistant", "content": {"parts": [tool]}},
    ])
    assert [m.id for m in saved] == ["a"]
    (recalled,) = memory.recall("t1").messages
    assert recalled.text == "Hello John!"
    assert "<working_memory>" not in str(recalled.content.to_dict())


def test_merge_needs_a_transactional_storage(storage):
    class NoTransactions:
        def get_thread(self, thread_id):
            return None

    wm = WorkingMemory(NoTransactions(), {"enabled": True, "schema": Profile})
    with pytest.raises(ConfigurationError, match="not supported by this storage adapter"):
        wm.merge("t1", {"name": "A"}, resource_id="r1")
