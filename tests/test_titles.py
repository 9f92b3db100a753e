"""Thread titles with ScriptedModel."""

from __future__ import annotations

import asyncio

import pytest
from threadrecall.errors import ModelError
from threadrecall.models import ScriptedModel
from threadrecall.titles import DEFAULT_TITLE_INSTRUCTIONS, agenerate_title, generate_title

CHAT = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "My kitchen tap\nkeeps leaking, what should I do?"},
    {"role": "assistant", "content": "Let's check the washer first."},
]


def test_prompt_is_a_user_assistant_transcript():
    model = ScriptedModel(["Fixing a leaking kitchen tap"])
    assert generate_title(model, CHAT) == "Fixing a leaking kitchen tap"
    (call,) = model.calls
    assert call.messages[0] == {"role": "system", "content": DEFAULT_TITLE_INSTRUCTIONS}
    prompt = call.messages[1]["content"]
    assert "User: My kitchen tap keeps leaking, what should I do?\n" \
           "Assistant: Let's check the washer first." in prompt
    assert "You are helpful" not in prompt


def test_default_instructions_cover_the_rules():
    text = DEFAULT_TITLE_INSTRUCTIONS.lower()
    for rule in ("do not answer", "always write a title", "80 characters", "no quotation marks",
                 "colons"):
        assert rule in text


def test_custom_instructions_replace_the_default():
    model = ScriptedModel(["Robinet"])
    generate_title(model, CHAT, instructions="Titre en français.")
    assert model.calls[0].messages[0]["content"] == "Titre en français."


@pytest.mark.parametrize("answer, title", [
    ("<think>The user asks about a tap.</think>\nLeaking tap repair", "Leaking tap repair"),
    ('"Leaking tap: what to do"', "Leaking tap what to do"),
    ("Title: Leaking tap", "Leaking tap"),
    ("“Leaking tap”.", "Leaking tap"),
    ("  Leaking\n tap  ", "Leaking tap"),
    ("<think>never closed", None),
    ("", None),
])
def test_answers_are_cleaned(answer, title):
    assert generate_title(ScriptedModel([answer]), CHAT) == title


def test_long_titles_are_cut_at_a_word():
    answer = "A very long title about " + "leaking kitchen taps and washers " * 5
    title = generate_title(ScriptedModel([answer]), CHAT)
    assert len(title) <= 80 and answer.startswith(title) and not title.endswith(" ")


def test_failures_return_none():
    assert generate_title(ScriptedModel([ModelError("down")]), CHAT) is None
    assert generate_title("nosuchprovider/model", CHAT) is None


def test_no_user_message_means_no_call():
    model = ScriptedModel(["x"])
    assert generate_title(model, [{"role": "assistant", "content": "Hi!"}]) is None
    assert generate_title(model, []) is None
    assert model.calls == []


def test_async_twin():
    assert asyncio.run(agenerate_title(ScriptedModel(["Leaking tap"]), CHAT)) == "Leaking tap"
    assert asyncio.run(agenerate_title(ScriptedModel([ModelError("x")]), CHAT)) is None


# ----------------------------------------------------------------------------- through Memory

def test_memory_titles_an_untitled_thread_once(storage):
    from threadrecall import Memory

    model = ScriptedModel(["<think>short</think> Title: Fixing a leaking kitchen tap"])
    memory = Memory(storage=storage, options={"generate_title": {"model": model}})
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{**m, "thread_id": "t1"} for m in CHAT])
    memory.settle(10)
    assert memory.get_thread_by_id("t1").title == "Fixing a leaking kitchen tap"
    memory.save_messages([{"thread_id": "t1", "role": "user", "content": "thanks"}])
    memory.settle(10)
    assert len(model.calls) == 1


def test_memory_waits_for_enough_user_messages_and_survives_failures(storage):
    from threadrecall import Memory

    model = ScriptedModel([ModelError("down"), "Plumbing help"])
    memory = Memory(storage=storage, options={"generate_title": {"model": model, "min_messages": 2}})
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"thread_id": "t1", "role": "user", "content": "My tap leaks"}])
    memory.settle(10)
    assert model.calls == [] and memory.get_thread_by_id("t1").title == ""
    memory.save_messages([{"thread_id": "t1", "role": "user", "content": "It drips all night"}])
    memory.settle(10)
    assert memory.get_thread_by_id("t1").title == ""  # the failure keeps the old title
    memory.save_messages([{"thread_id": "t1", "role": "assistant", "content": "Replace the washer"}])
    memory.settle(10)
    assert memory.get_thread_by_id("t1").title == "Plumbing help"


@pytest.mark.parametrize("value", [True, {"instructions": "x"}, {"model": "openai/x", "colour": 1},
                                   {"model": ScriptedModel([]), "min_messages": 0}])
def test_generate_title_config_errors(value):
    from threadrecall import Memory
    from threadrecall.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        Memory(options={"generate_title": value})
