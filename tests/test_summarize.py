"""summarize_conversation and the thread loader, with ScriptedModel standing in for the model."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from pydantic import BaseModel
from threadrecall.errors import AbortedError, ExtractorError, InvalidArgumentError, ModelError
from threadrecall.extractors import Extractor
from threadrecall.models import Generation, ScriptedModel
from threadrecall.summarize import (
    SummarizeResult,
    asummarize_conversation,
    coerce_messages,
    load_messages_for_summary,
    parse_observations,
    summarize_conversation,
)

T0 = datetime(2026, 1, 5, 9, 30, tzinfo=timezone.utc)
OBS = ("<observations>\nDate: Jan 5, 2026\n* 🔴 (09:30) User called about a leaking tap.\n"
       "</observations>")
USAGE = {"input_tokens": 100, "output_tokens": 50, "total_tokens": 150}


def conversation(n=2, thread_id="call-1", resource_id="caller-1", start=T0):
    roles = ("user", "assistant")
    return [{"id": f"m{i}", "thread_id": thread_id, "resource_id": resource_id,
             "role": roles[i % 2], "content": f"Message {i + 1}",
             "created_at": start + timedelta(minutes=i)} for i in range(n)]


# --------------------------------------------------------------------------- 104-108

def test_returns_observations_and_observer_usage_only():
    model = ScriptedModel([OBS], usage=USAGE)
    result = summarize_conversation(conversation(), model)
    assert isinstance(result, SummarizeResult)
    assert result.summary == "Date: Jan 5, 2026\n* 🔴 (09:30) User called about a leaking tap."
    assert result.extracted == {}
    assert result.extraction_failures is None
    assert result.usage["total_tokens"] == 150
    assert len(model.calls) == 1


def test_prompt_has_system_task_and_dated_transcript():
    model = ScriptedModel([OBS])
    messages = conversation(3)
    messages.append({"role": "user", "content": "next day", "created_at": T0 + timedelta(days=1)})
    summarize_conversation(messages, model)
    call = model.calls[0]
    assert [m["role"] for m in call.messages] == ["system", "user", "user"]
    assert "<observations>" in call.system and "=== CUSTOM INSTRUCTIONS ===" not in call.system
    transcript = call.messages[2]["content"]
    assert ("Jan 5, 2026:\nUser (09:30): Message 1\nAssistant (09:31): Message 2\n"
            "User (09:32): Message 3\n\nJan 6, 2026:\nUser (09:30): next day") in transcript
    assert call.settings == {"temperature": 0.3}


def test_custom_instructions_reach_the_system_prompt():
    model = ScriptedModel([OBS])
    summarize_conversation(conversation(), model,
                           instructions="Summarize this voicemail call for the business owner.")
    system = model.calls[0].system
    assert "=== CUSTOM INSTRUCTIONS ===" in system
    assert system.rstrip().endswith("Summarize this voicemail call for the business owner.")


def test_inline_extractor_value_and_hook_context():
    seen = []
    sentiment = Extractor("Call Sentiment", instructions="positive, neutral or negative",
                          on_extracted=seen.append)
    model = ScriptedModel([OBS + "\n<call-sentiment>positive</call-sentiment>"])
    result = summarize_conversation(conversation(), model, extract=[sentiment])
    assert result.extracted == {"call-sentiment": "positive"}
    assert "<call-sentiment>" in model.calls[0].system
    assert "call-sentiment" not in result.summary
    (ctx,) = seen
    assert (ctx.current, ctx.thread_id, ctx.resource_id) == ("positive", "call-1", "caller-1")
    assert ctx.source == "observer" and ctx.extractor is sentiment and ctx.previous is None


class CallSummary(BaseModel):
    summary: str
    sentiment: str
    requested_services: list[str]


def test_structured_extractor_runs_a_follow_up_call():
    record = {"summary": "Leaking tap", "sentiment": "neutral", "requested_services": ["plumbing"]}
    hooked = []
    extractor = Extractor("call-summary", instructions="A record of the call.",
                          schema=CallSummary, metadata_key_path=False,
                          on_extracted=lambda ctx: hooked.append(ctx.current))
    model = ScriptedModel([OBS, {"call-summary": record}], usage=USAGE)
    result = summarize_conversation(conversation(), model, extract=[extractor])
    assert result.extracted["call-summary"] == CallSummary(**record)
    assert hooked == [CallSummary(**record)]
    assert result.usage["total_tokens"] == 150  # the follow-up call is not counted
    follow_up = model.calls[1]
    assert follow_up.messages[3] == {"role": "assistant", "content": OBS}
    assert "- call-summary: A record of the call." in follow_up.messages[-1]["content"]
    schema = follow_up.response_format
    assert schema["type"] == "object" and list(schema["properties"]) == ["call-summary"]


def test_no_messages_means_no_model_call():
    model = ScriptedModel([])
    result = summarize_conversation([], model)
    assert (result.summary, result.extracted, result.extraction_failures) == ("", {}, None)
    assert model.calls == []


# --------------------------------------------------------------------------- parsing

def test_list_item_fallback_and_line_cut():
    text = "Notes:\n- first\nprose\n  * nested\n2. third\n- " + "x" * 10_050
    summary = parse_observations(text)
    lines = summary.splitlines()
    assert lines[:3] == ["- first", "  * nested", "2. third"]
    assert lines[3] == "- " + "x" * 9_998 + " … [truncated]"


def test_only_line_anchored_blocks_count():
    text = ("I will write <observations>inline</observations>\n"
            "<observations>\n* kept\n</observations>")
    assert parse_observations(text) == "* kept"


def test_degenerate_output_is_retried_once():
    loop = "* 🟢 (09:30) the same line again\n" * 100
    model = ScriptedModel([loop, OBS], usage=USAGE)
    result = summarize_conversation(conversation(), model)
    assert "leaking tap" in result.summary
    assert len(model.calls) == 2
    assert result.usage["total_tokens"] == 300


def test_degenerate_twice_is_an_error():
    loop = "<observations>\n" + "* 🟢 (09:30) again and again\n" * 100
    with pytest.raises(ModelError, match="degenerate output after retry"):
        summarize_conversation(conversation(), ScriptedModel([loop, loop]))


# --------------------------------------------------------------------------- failures, abort

def test_structured_extraction_retries_with_schema_in_prompt():
    extractor = Extractor("priority", instructions="1-5", schema={"type": "integer"})
    model = ScriptedModel([OBS, ModelError("structured output unsupported"),
                           '```json\n{"priority": 4}\n```'])
    result = summarize_conversation(conversation(), model, extract=[extractor])
    assert result.extracted == {"priority": 4}
    assert model.calls[2].response_format is None
    assert '"priority"' in model.calls[2].messages[-1]["content"]


def test_structured_extraction_failing_twice_records_failures():
    a = Extractor("priority", instructions="1-5", schema={"type": "integer"})
    b = Extractor("owner", instructions="who", schema={"type": "string"})
    model = ScriptedModel([OBS, ModelError("boom"), "not json at all"])
    result = summarize_conversation(conversation(), model, extract=[a, b])
    assert result.extracted == {}
    assert [f["slug"] for f in result.extraction_failures] == ["priority", "owner"]
    assert result.summary  # the summary survives


def test_structured_value_that_misses_the_schema_fails_alone():
    a = Extractor("priority", instructions="1-5", schema={"type": "integer"})
    b = Extractor("owner", instructions="who", schema={"type": "string"})
    model = ScriptedModel([OBS, {"priority": "high", "owner": "Ana", "extra": 1}])
    result = summarize_conversation(conversation(), model, extract=[a, b])
    assert result.extracted == {"owner": "Ana"}
    assert result.extraction_failures[0]["slug"] == "priority"
    assert "did not match" in result.extraction_failures[0]["error"]


def test_empty_structured_object_retried_when_asked():
    a = Extractor("owner", instructions="who", schema={"type": "string"},
                  retry_structured_extraction_on_empty_object=True)
    model = ScriptedModel([OBS, {}, '{"owner": "Ana"}'])
    assert summarize_conversation(conversation(), model, extract=[a]).extracted == {"owner": "Ana"}


def test_hook_failure_and_replacement():
    def boom(ctx):
        raise RuntimeError("database down")

    a = Extractor("mood", instructions="mood", on_extracted=boom)
    b = Extractor("topic", instructions="topic", on_extracted=lambda ctx: ctx.current.upper())
    c = Extractor("count", instructions="n", mode="inline", schema={"type": "integer"},
                  on_extracted=lambda ctx: "many")
    model = ScriptedModel([OBS + "\n<mood>calm</mood>\n<topic>plumbing</topic>\n<count>3</count>"])
    result = summarize_conversation(conversation(), model, extract=[a, b, c])
    assert result.extracted == {"topic": "PLUMBING"}
    failures = {f["slug"]: f["error"] for f in result.extraction_failures}
    assert failures["mood"] == "database down"
    assert "did not match" in failures["count"]


def test_hook_not_called_without_a_value_but_hook_mode_runs():
    called = []
    a = Extractor("mood", instructions="mood", on_extracted=called.append)
    b = Extractor("audit", mode="hook", on_extracted=lambda ctx: called.append(ctx) or None)
    model = ScriptedModel([OBS + "\n<mood>  </mood>"])
    result = summarize_conversation(conversation(), model, extract=[a, b])
    assert result.extracted == {}
    assert len(called) == 1 and called[0].current is None and called[0].extractor is b


def test_abort_before_start_makes_no_call():
    stop = threading.Event()
    stop.set()
    model = ScriptedModel([OBS])
    with pytest.raises(AbortedError, match="aborted"):
        summarize_conversation(conversation(), model, abort_signal=stop)
    assert model.calls == []


def test_abort_in_a_hook_propagates():
    stop = threading.Event()

    def hook(ctx):
        stop.set()
        raise RuntimeError("cancelled")

    a = Extractor("mood", instructions="mood", on_extracted=hook)
    with pytest.raises(RuntimeError, match="cancelled"):
        summarize_conversation(conversation(), ScriptedModel([OBS + "<mood>ok</mood>"]),
                               extract=[a], abort_signal=stop)


def test_abort_during_structured_call_propagates():
    stop = threading.Event()

    def answer(messages, response_format):
        stop.set()
        return ModelError("interrupted")

    a = Extractor("owner", instructions="who", schema={"type": "string"})
    with pytest.raises(AbortedError):
        summarize_conversation(conversation(), ScriptedModel([OBS, answer]), extract=[a],
                               abort_signal=stop)


def test_model_errors_propagate_from_the_observer_call():
    with pytest.raises(ModelError, match="down"):
        summarize_conversation(conversation(), ScriptedModel([ModelError("down")]))


def test_bad_inputs():
    with pytest.raises(InvalidArgumentError):
        summarize_conversation("hello", ScriptedModel([]))
    with pytest.raises(InvalidArgumentError):
        summarize_conversation([{"role": "robot", "content": "x"}], ScriptedModel([]))
    with pytest.raises(ExtractorError, match="Duplicate extractor slug"):
        summarize_conversation(conversation(), ScriptedModel([]),
                               extract=[Extractor("Priority", instructions="a"),
                                        Extractor("priority", instructions="b")])


def test_async_twin_with_async_hook():
    seen = []

    async def hook(ctx):
        await asyncio.sleep(0)
        seen.append(ctx.current)
        return ctx.current + "!"

    a = Extractor("mood", instructions="mood", on_extracted=hook)
    model = ScriptedModel([OBS + "<mood>calm</mood>"], usage=USAGE)
    result = asyncio.run(asummarize_conversation(conversation(), model, extract=[a]))
    assert result.extracted == {"mood": "calm!"} and seen == ["calm"]
    assert result.usage == USAGE


def test_sync_call_with_async_hook():
    async def hook(ctx):
        return ctx.current * 2

    a = Extractor("n", instructions="n", mode="inline", schema={"type": "integer"},
                  on_extracted=hook)
    result = summarize_conversation(conversation(), ScriptedModel([OBS + "<n>21</n>"]),
                                    extract=[a])
    assert result.extracted == {"n": 42}


def test_model_without_agenerate_works_async():
    class Plain:
        def generate(self, messages, *, response_format=None, **settings):
            return Generation(OBS, USAGE)

    result = asyncio.run(asummarize_conversation(conversation(), Plain()))
    assert "leaking tap" in result.summary


def test_tool_calls_are_summarised_in_the_transcript():
    model = ScriptedModel([OBS])
    message = {"role": "assistant", "created_at": T0, "content": {"parts": [
        {"type": "text", "text": "Checking the weather."},
        {"type": "tool-invocation", "tool_invocation": {
            "tool_name": "weather", "args": {"city": "Lyon"}, "result": {"temp": 21}}}]}}
    summarize_conversation([message], model)
    transcript = model.calls[0].messages[2]["content"]
    assert 'Assistant (09:30): Checking the weather.\n[tool call] weather({"city": "Lyon"})' \
        in transcript
    assert '[tool result] weather: {"temp": 21}' in transcript


# --------------------------------------------------------------------------- 109-112 loading

@dataclass
class Page:
    messages: list
    has_more: bool


class Thread:
    """Memory.recall's paging over a chronological list: page p is the p-th newest page."""

    def __init__(self, n):
        self.messages = coerce_messages(
            [{"id": f"m{i:03d}", "thread_id": "t", "role": ("user", "assistant")[i % 2],
              "content": f"marker-{i + 1:03d}", "created_at": T0 + timedelta(seconds=i)}
             for i in range(n)])
        self.pages = []

    def recall(self, thread_id, *, resource_id=None, per_page, page):
        self.pages.append(page)
        end = max(0, len(self.messages) - page * per_page)
        start = max(0, end - per_page)
        return Page(self.messages[start:end], start > 0)


def test_loader_reads_every_page_in_order():
    thread = Thread(120)
    messages = load_messages_for_summary(thread.recall, "t")
    assert [m.text for m in messages] == [f"marker-{i:03d}" for i in range(1, 121)]
    assert thread.pages == [0, 1]
    model = ScriptedModel([OBS])
    summarize_conversation(messages, model)
    transcript = model.calls[0].prompt
    positions = [transcript.index(f"marker-{i:03d}") for i in range(1, 121)]
    assert positions == sorted(positions)


def test_loader_last_messages():
    thread = Thread(10)
    messages = load_messages_for_summary(thread.recall, "t", last_messages=2)
    assert [m.text for m in messages] == ["marker-009", "marker-010"]
    assert load_messages_for_summary(thread.recall, "t", last_messages=0) == []


def test_loader_keeps_only_newest_under_a_tiny_budget():
    thread = Thread(10)
    messages = load_messages_for_summary(thread.recall, "t", max_input_tokens=10)
    assert [m.text for m in messages] == ["marker-010"]
    over = load_messages_for_summary(thread.recall, "t", max_input_tokens=1)
    assert [m.text for m in over] == ["marker-010"]  # the newest is kept even over budget


def test_loader_stops_at_the_budget_across_pages():
    thread = Thread(150)
    per_message = 10  # "marker-001" -> round((4 + 10) / 4 + 3.8) == 7 for user; 9-char role: 8
    messages = load_messages_for_summary(thread.recall, "t", max_input_tokens=105 * per_message)
    assert 100 < len(messages) < 150
    assert messages[-1].text == "marker-150"
    assert thread.pages == [0, 1]


def test_loader_abort_and_bad_arguments():
    thread = Thread(3)
    stop = threading.Event()
    stop.set()
    with pytest.raises(AbortedError):
        load_messages_for_summary(thread.recall, "t", abort_signal=stop)
    with pytest.raises(InvalidArgumentError):
        load_messages_for_summary(thread.recall, "t", max_input_tokens=0)
    with pytest.raises(InvalidArgumentError):
        load_messages_for_summary(thread.recall, "t", last_messages="2")


# --------------------------------------------------------------------------- through Memory

def memory_with_thread(n, thread_id="call-1", resource_id="caller-1"):
    from threadrecall import Memory

    memory = Memory()
    memory.create_thread(resource_id, thread_id=thread_id)
    memory.save_messages([
        {"id": f"m{i:03d}", "thread_id": thread_id, "role": ("user", "assistant")[i % 2],
         "content": f"marker-{i + 1:03d}", "created_at": T0 + timedelta(seconds=i)}
        for i in range(n)])
    return memory


def test_summarize_thread_loads_the_thread_from_storage():
    memory = memory_with_thread(4)
    seen = []
    mood = Extractor("mood", instructions="m", on_extracted=seen.append)
    model = ScriptedModel([OBS + "<mood>calm</mood>"], usage=USAGE)
    result = memory.summarize_thread("call-1", model, resource_id="caller-1", extract=[mood],
                                     instructions="For the owner.")
    assert "leaking tap" in result.summary and result.extracted == {"mood": "calm"}
    transcript = model.calls[0].messages[2]["content"]
    assert all(f"marker-00{i}" in transcript for i in range(1, 5))
    assert "For the owner." in model.calls[0].system
    assert seen[0].memory is memory and seen[0].thread_id == "call-1"
    assert seen[0].resource_id == "caller-1"


def test_summarize_thread_last_messages_and_budget():
    memory = memory_with_thread(6)
    model = ScriptedModel([OBS, OBS])
    memory.summarize_thread("call-1", model, last_messages=2)
    transcript = model.calls[0].messages[2]["content"]
    assert "marker-005" in transcript and "marker-006" in transcript
    assert "marker-004" not in transcript
    memory.summarize_thread("call-1", model, max_input_tokens=10)
    transcript = model.calls[1].messages[2]["content"]
    assert "marker-006" in transcript and "marker-005" not in transcript


def test_summarize_thread_pages_through_120_messages():
    memory = memory_with_thread(120)
    model = ScriptedModel([OBS])
    memory.summarize_thread("call-1", model)
    transcript = model.calls[0].messages[2]["content"]
    positions = [transcript.index(f"marker-{i:03d}") for i in range(1, 121)]
    assert positions == sorted(positions)


def test_summarize_thread_checks_ownership_and_handles_empty_threads():
    from threadrecall.errors import ResourceMismatchError

    memory = memory_with_thread(2)
    with pytest.raises(ResourceMismatchError):
        memory.summarize_thread("call-1", ScriptedModel([OBS]), resource_id="someone-else")
    memory.create_thread("caller-1", thread_id="empty")
    model = ScriptedModel([])
    assert memory.summarize_thread("empty", model).summary == ""
    assert model.calls == []


def test_asummarize_thread():
    memory = memory_with_thread(3)
    model = ScriptedModel([OBS], usage=USAGE)
    result = asyncio.run(memory.asummarize_thread("call-1", model, last_messages=1))
    assert result.usage == USAGE
    assert "marker-003" in model.calls[0].prompt and "marker-002" not in model.calls[0].prompt


def test_public_names():
    import threadrecall

    assert threadrecall.Extractor is Extractor
    assert threadrecall.summarize_conversation is summarize_conversation


def test_sync_call_inside_a_running_loop_with_async_hook():
    async def hook(ctx):
        await asyncio.sleep(0)
        return ctx.current.upper()

    async def main():
        a = Extractor("mood", instructions="m", on_extracted=hook)
        return summarize_conversation(conversation(), ScriptedModel([OBS + "<mood>calm</mood>"]),
                                      extract=[a])

    assert asyncio.run(main()).extracted == {"mood": "CALM"}
