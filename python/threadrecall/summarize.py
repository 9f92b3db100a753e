"""One-shot conversation summaries: ``summarize_conversation`` and the thread loader behind
``Memory.summarize_thread``.

The summarising model (the *observer*) reads a dated transcript and writes a dense, dated,
prioritised bullet list inside ``<observations>`` blocks. Extractors ride along: inline ones
answer in the same call, structured ones in one follow-up call, and every extractor's
``on_extracted`` hook runs at the end. Nothing is written to storage.
"""

from __future__ import annotations

import inspect
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from .effects import ModelCall, Program, run_async, run_sync
from .errors import InvalidArgumentError, ModelError
from .extractors import (
    Extractor,
    ExtractorContext,
    apply_extractor_hooks,
    extract_structured_values,
    inline_sections_prompt,
    parse_inline_values,
    resolve_extractors,
)
from .models.base import add_usage, empty_usage, raise_if_aborted
from .models.router import resolve_model
from .types import Message, to_utc

__all__ = [
    "SummarizeResult",
    "summarize_conversation",
    "asummarize_conversation",
    "load_messages_for_summary",
    "estimate_message_tokens",
    "format_transcript",
    "build_observer_messages",
    "parse_observations",
    "is_degenerate",
    "coerce_messages",
    "message_text",
]

SUMMARY_PAGE_SIZE = 100
MAX_LINE_CHARS = 10_000
TOOL_RESULT_CHARS = 2_000
OBSERVER_SETTINGS = {"temperature": 0.3}
DEGENERATE_MIN_CHARS = 2_000

OBSERVER_ROLE = """\
You are the note-taker for an AI assistant's memory. You read a conversation between a user \
and the assistant and write observations: short, dated notes of everything the assistant \
would need to remember later. Record only what the conversation contains; never invent, \
guess, or answer the user yourself."""

OBSERVER_RULES = """\
=== WHAT TO RECORD ===
- Statements versus questions: record what the user states as fact ("User lives in Lyon"). \
Record a question as a question that was asked ("User asked how to renew a passport"), never \
as a fact.
- Changes: when something replaces an earlier state, say so explicitly ("User moved from \
Lyon to Nantes; Nantes is current").
- Time: every note carries the time of the message it comes from. Turn relative dates \
("next Friday", "two weeks ago") into calendar dates using that time, and keep the original \
wording in parentheses.
- Exact details: keep names, numbers, amounts, addresses, identifiers and quantities exactly \
as written; quote unusual or distinctive wording.
- What the assistant did: note the answers, recommendations and results that matter, with \
their specifics (what was suggested, what a tool returned), not only that something happened.
- Requests and intent: note what the user wants, why, and the constraints or preferences \
they gave.
- Outcomes: mark tasks that were finished, decisions that were made and questions that were \
settled.
- No repetition: one note per fact; fold closely related details into one note."""

OBSERVER_FORMAT = """\
=== OUTPUT FORMAT ===
Write every note inside one <observations> block. Group notes under a line \
"Date: Mon D, YYYY" for each day. Each note is one bullet:
* <priority> (HH:MM) note text
where <priority> is one of:
🔴 important: facts about the user, commitments, decisions, deadlines
🟡 useful: context, preferences, details of the work
🟢 minor: small talk and passing details
✅ done: a task, question or request that was completed
Indent sub-bullets under a note to group the steps of one action, such as a series of tool \
calls.

Example:
<observations>
Date: Mar 3, 2026
* 🔴 (09:14) User plans to move to Nantes on Apr 1, 2026 ("first of next month").
* 🟡 (09:15) User asked for moving companies near Lyon; assistant listed three.
  * searched "movers Lyon", 5 results
* ✅ (09:20) Assistant booked a quote visit for Mar 5, 2026.
</observations>"""

OBSERVER_GUIDELINES = """\
=== GUIDELINES ===
- Write one to five notes per exchange; more only when an exchange is dense with facts.
- Be terse: fragments are fine, filler is not.
- Never reply to the user and never continue the conversation.
- Write in the language of the conversation.
- The history comes from a single conversation: do not add thread labels or tags."""

OBSERVER_TASK = """\
## Your Task
Read the message history below and write observations about it, following the system \
instructions. This is the first pass over this conversation, so there are no earlier \
observations to build on. Answer with an <observations> block every time."""

_OBSERVATIONS = re.compile(r"^[ \t]*<observations>(.*?)</observations>", re.DOTALL | re.MULTILINE)
_OPEN_OBSERVATIONS = re.compile(r"^[ \t]*<observations>(.*)\Z", re.DOTALL | re.MULTILINE)
_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+\S")


@dataclass(frozen=True)
class SummarizeResult:
    """A summary: the bullet list, extracted values by slug, failures (None when there are
    none) and the token usage of the summarising call."""

    summary: str
    extracted: dict[str, Any]
    extraction_failures: list[dict[str, str]] | None
    usage: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "extracted": dict(self.extracted),
                "extraction_failures": self.extraction_failures, "usage": dict(self.usage)}


def summarize_conversation(messages: Iterable[Message | Mapping[str, Any]], model: Any, *,
                           instructions: str | None = None,
                           extract: Sequence[Extractor] | None = None,
                           thread_id: str | None = None, resource_id: str | None = None,
                           request_context: Any = None, abort_signal: Any = None,
                           memory: Any = None) -> SummarizeResult:
    """Summarise ``messages`` with ``model`` (a ``LanguageModel`` or ``"provider/model"``).

    Args:
        messages: ``Message`` objects or dicts, oldest first.
        model: a ``LanguageModel`` or a router string ``"provider/model"``.
        instructions: extra instructions for the model.
        extract: ``Extractor``s whose values are pulled from the summary.
        thread_id: the thread summarised (given to the extractors' hooks).
        resource_id: its owner (given to the extractors' hooks).
        request_context: passed to the extractors' hooks.
        abort_signal: anything with ``is_set()``; set, it stops the call (``AbortedError``).
        memory: the ``Memory`` the extractors' hooks may write to.

    >>> from threadrecall.models import ScriptedModel
    >>> model = ScriptedModel(["<observations>\\n* 🔴 (09:00) User likes tea.\\n</observations>"])
    >>> summarize_conversation([{"role": "user", "content": "I like tea"}], model).summary
    '* 🔴 (09:00) User likes tea.'
    """
    return run_sync(_summarize(messages, model, instructions, extract, thread_id, resource_id,
                               request_context, abort_signal, memory))


async def asummarize_conversation(messages: Iterable[Message | Mapping[str, Any]], model: Any, *,
                                  instructions: str | None = None,
                                  extract: Sequence[Extractor] | None = None,
                                  thread_id: str | None = None, resource_id: str | None = None,
                                  request_context: Any = None, abort_signal: Any = None,
                                  memory: Any = None) -> SummarizeResult:
    """The async twin of ``summarize_conversation``."""
    return await run_async(_summarize(messages, model, instructions, extract, thread_id,
                                      resource_id, request_context, abort_signal, memory))


def _summarize(messages: Iterable[Message | Mapping[str, Any]], model: Any,
               instructions: str | None, extract: Sequence[Extractor] | None,
               thread_id: str | None, resource_id: str | None, request_context: Any,
               abort_signal: Any, memory: Any) -> Program[SummarizeResult]:
    raise_if_aborted(abort_signal)
    messages = coerce_messages(messages, thread_id=thread_id, resource_id=resource_id)
    thread_id = thread_id or next((m.thread_id for m in messages if m.thread_id), None)
    resource_id = resource_id or next((m.resource_id for m in messages if m.resource_id), None)
    context = ExtractorContext("observer", thread_id, resource_id, memory, request_context)
    extractors = resolve_extractors(extract, context)
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidArgumentError("instructions must be a string")
    model = resolve_model(model)
    if not messages:
        return SummarizeResult("", {}, None, empty_usage())

    settings = _settings_for(model, abort_signal)
    observer_messages = build_observer_messages(messages, instructions=instructions,
                                                extractors=extractors)
    usage = empty_usage()
    for _ in range(2):
        raise_if_aborted(abort_signal)
        generation = yield ModelCall(model, observer_messages, None, settings)
        raise_if_aborted(abort_signal)
        usage = add_usage(usage, generation.usage)
        if not is_degenerate(generation.text):
            break
    else:
        raise ModelError("Observer produced degenerate output after retry: the model kept "
                         "repeating itself", provider=getattr(model, "provider", ""),
                         hint="try a lower temperature or another model")

    inline = parse_inline_values(generation.text, extractors)
    values, failures = dict(inline.values), list(inline.failures)
    conversation = [*observer_messages, {"role": "assistant", "content": generation.text}]
    structured_values, structured_failures = yield from extract_structured_values(
        model, conversation, extractors, abort_signal=abort_signal, settings=settings)
    values.update(structured_values)
    failures += structured_failures
    values, failures = yield from apply_extractor_hooks(
        extractors, values, failures, source="observer", thread_id=thread_id,
        resource_id=resource_id, memory=memory, request_context=request_context,
        abort_signal=abort_signal)
    return SummarizeResult(parse_observations(inline.text), values, failures or None, usage)


def _settings_for(model: Any, abort_signal: Any) -> dict[str, Any]:
    """Observer settings, plus the abort signal for models whose ``generate`` names it."""
    settings: dict[str, Any] = dict(OBSERVER_SETTINGS)
    try:
        takes_abort = "abort_signal" in inspect.signature(model.generate).parameters
    except (TypeError, ValueError):
        takes_abort = False
    if takes_abort and abort_signal is not None:
        settings["abort_signal"] = abort_signal
    return settings


# --------------------------------------------------------------------------- prompt

def build_observer_messages(messages: Sequence[Message], *, instructions: str | None = None,
                            extractors: Sequence[Any] = ()) -> list[dict[str, str]]:
    """The chat messages of the summarising call: system prompt, task, transcript."""
    system = [OBSERVER_ROLE, OBSERVER_RULES, OBSERVER_FORMAT]
    sections = inline_sections_prompt(extractors)
    if sections:
        system.append(sections)
    system.append(OBSERVER_GUIDELINES)
    if instructions and instructions.strip():
        system.append("=== CUSTOM INSTRUCTIONS ===\n" + instructions.strip())
    return [
        {"role": "system", "content": "\n\n".join(system)},
        {"role": "user", "content": OBSERVER_TASK},
        {"role": "user", "content": "## Message History\n\n" + format_transcript(messages)},
    ]


def format_transcript(messages: Sequence[Message]) -> str:
    """Render messages as a dated transcript: a ``Mon D, YYYY:`` header per day and
    ``Role (HH:MM): text`` lines, the time shown only when it changes.

    >>> from datetime import datetime, timezone
    >>> t = datetime(2026, 1, 5, 9, 30, tzinfo=timezone.utc)
    >>> m = coerce_messages([{"role": "user", "content": "hi", "created_at": t},
    ...                      {"role": "assistant", "content": "hello", "created_at": t}])
    >>> print(format_transcript(m))
    Jan 5, 2026:
    User (09:30): hi
    Assistant: hello
    """
    lines: list[str] = []
    last_date = last_time = None
    for message in messages:
        text = message_text(message)
        if not text:
            continue
        when = to_utc(message.created_at)
        date = f"{when:%b} {when.day}, {when.year}"
        if date != last_date:
            if lines:
                lines.append("")
            lines.append(f"{date}:")
            last_date, last_time = date, None
        clock = f"{when:%H:%M}"
        stamp = f" ({clock})" if clock != last_time else ""
        last_time = clock
        lines.append(f"{message.role.capitalize()}{stamp}: {text}")
    return "\n".join(lines)


def message_text(message: Message) -> str:
    """A message as transcript text: its text, summarised tool calls and results, files."""
    pieces: list[str] = []
    for part in message.content.parts:
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            pieces.append(part["text"])
        elif kind == "tool-invocation":
            pieces.extend(_tool_lines(part.get("tool_invocation") or part.get("toolInvocation")
                                      or {}))
        elif kind == "file":
            label = part.get("filename") or part.get("media_type") or part.get("mediaType")
            pieces.append(f"[file: {label or 'attachment'}]")
    if not any(p.strip() for p in pieces) and message.content.text:
        pieces = [message.content.text]
    return "\n".join(p for p in pieces if p.strip()).strip()


def _tool_lines(call: Mapping[str, Any]) -> list[str]:
    name = call.get("tool_name") or call.get("toolName") or "tool"
    lines = [f"[tool call] {name}({_compact(call.get('args', {}))})"]
    if "result" in call:
        lines.append(f"[tool result] {name}: {_clip(_compact(call['result']), TOOL_RESULT_CHARS)}")
    return lines


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " … [truncated]"


# --------------------------------------------------------------------------- answer

def parse_observations(text: str) -> str:
    """The summary in a model answer: every line-anchored ``<observations>`` block, or, when
    there is none, only the list-item lines. Overlong lines are cut.

    >>> parse_observations("chatter\\n<observations>\\n* a\\n</observations>\\n"
    ...                    "<observations>* b</observations>")
    '* a\\n* b'
    >>> parse_observations("Here:\\n- a\\n1. b\\nbye")
    '- a\\n1. b'
    """
    blocks = [m.group(1).strip() for m in _OBSERVATIONS.finditer(text)]
    if not blocks:
        unclosed = _OPEN_OBSERVATIONS.search(text)
        if unclosed:
            blocks = [unclosed.group(1).strip()]
    if blocks:
        body = "\n".join(b for b in blocks if b)
    else:
        body = "\n".join(line for line in text.splitlines() if _LIST_ITEM.match(line))
    return "\n".join(_clip(line, MAX_LINE_CHARS) for line in body.splitlines()).strip()


def is_degenerate(text: str) -> bool:
    """True for a long answer stuck in a loop: mostly the same lines, or a tail that keeps
    recurring."""
    if len(text) < DEGENERATE_MIN_CHARS:
        return False
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) >= 10 and len(set(lines)) / len(lines) < 0.3:
        return True
    tail = text.rstrip()[-100:]
    return len(tail) == 100 and text.count(tail) >= 8


# --------------------------------------------------------------------------- input

def coerce_messages(messages: Iterable[Message | Mapping[str, Any]], *,
                    thread_id: str | None = None,
                    resource_id: str | None = None) -> list[Message]:
    """Messages as ``Message`` objects; dicts may omit ``id``, ``thread_id`` and ``created_at``
    (filled with a fresh id, the given thread and the current time)."""
    if isinstance(messages, (str, bytes, Mapping)):
        raise InvalidArgumentError("messages must be a list of messages")
    now = datetime.now(timezone.utc)
    out = []
    for item in messages:
        if isinstance(item, Message):
            out.append(item)
            continue
        if not isinstance(item, Mapping):
            raise InvalidArgumentError(
                f"a message must be a Message or a dict, got {type(item).__name__}")
        data = dict(item)
        data.setdefault("id", str(uuid.uuid4()))
        data["thread_id"] = data.get("thread_id") or thread_id or ""
        data.setdefault("resource_id", resource_id)
        data["created_at"] = data.get("created_at") or now
        if data.get("role") not in ("user", "assistant", "system", "tool"):
            raise InvalidArgumentError(f"message role must be user, assistant, system or tool, "
                                       f"got {data.get('role')!r}")
        try:
            out.append(Message.from_dict(data))
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"invalid message: {exc}") from None
    return out


def estimate_message_tokens(message: Message) -> int:
    """A tokenizer-free estimate: about one token per four characters, plus 3.8 per message.

    >>> estimate_message_tokens(coerce_messages([{"role": "user", "content": "x" * 40}])[0])
    15
    """
    return round((len(message.role) + len(message_text(message))) / 4 + 3.8)


def load_messages_for_summary(recall: Callable[..., Any], thread_id: str, *,
                              resource_id: str | None = None, last_messages: int | None = None,
                              max_input_tokens: int = 1_000_000,
                              abort_signal: Any = None) -> list[Message]:
    """Load the newest messages of a thread, within ``last_messages`` and ``max_input_tokens``.

    ``recall(thread_id, resource_id=..., per_page=100, page=p)`` returns the p-th newest page
    in chronological order (``Memory.recall``). Pages are walked newest first; the newest
    message is always kept, even alone over budget. The result is chronological.
    """
    if last_messages is not None and (isinstance(last_messages, bool)
                                      or not isinstance(last_messages, int)):
        raise InvalidArgumentError("last_messages must be an integer or None")
    if isinstance(max_input_tokens, bool) or not isinstance(max_input_tokens, int) \
            or max_input_tokens <= 0:
        raise InvalidArgumentError("max_input_tokens must be a positive integer")
    if last_messages is not None and last_messages <= 0:
        return []
    collected: list[Message] = []
    tokens = 0
    page = 0
    while True:
        raise_if_aborted(abort_signal)
        result = recall(thread_id, resource_id=resource_id, per_page=SUMMARY_PAGE_SIZE, page=page)
        batch = list(result.messages)
        if not batch:
            break
        kept: list[Message] = []
        limited = False
        for message in reversed(batch):
            raise_if_aborted(abort_signal)
            if last_messages is not None and len(collected) + len(kept) >= last_messages:
                limited = True
                break
            cost = estimate_message_tokens(message)
            if (collected or kept) and tokens + cost > max_input_tokens:
                limited = True
                break
            kept.append(message)
            tokens += cost
        collected = kept[::-1] + collected
        if limited or not result.has_more:
            break
        page += 1
    return collected

