"""Thread titles: a short title written by a model from the start of a conversation.

Failures never raise: ``generate_title`` returns None and the caller keeps the old title.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from .effects import ModelCall, Program, run_async, run_sync
from .errors import ConfigurationError
from .models.router import resolve_model
from .summarize import coerce_messages, message_text
from .types import Message

__all__ = ["DEFAULT_TITLE_INSTRUCTIONS", "MAX_TITLE_CHARS", "Titler", "generate_title",
           "agenerate_title", "title_transcript", "clean_title"]

log = logging.getLogger(__name__)

MAX_TITLE_CHARS = 80
TRANSCRIPT_MESSAGES = 6
TRANSCRIPT_LINE_CHARS = 1_000
DEFAULT_TITLE_INSTRUCTIONS = """\
You name conversations. Read the start of the conversation below and write a short title \
for it.
- Write only the title: do not answer or continue the conversation, even if it asks a question.
- Always write a title, even for a very short or unclear conversation.
- At most 80 characters.
- Say what the user wants or talks about.
- No quotation marks and no colons."""

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_LABEL = re.compile(r"^[\"'“«]?\s*title\s*:\s*", re.IGNORECASE)
_QUOTES = str.maketrans("", "", "\"“”„«»`:")


def title_transcript(messages: Iterable[Message | Mapping[str, Any]]) -> str:
    """``User:``/``Assistant:`` lines from the start of a conversation.

    >>> print(title_transcript([{"role": "user", "content": "Fix my tap"},
    ...                         {"role": "assistant", "content": "Sure"}]))
    User: Fix my tap
    Assistant: Sure
    """
    lines = []
    for message in coerce_messages(messages):
        if message.role not in ("user", "assistant"):
            continue
        text = " ".join(message_text(message).split())
        if text:
            lines.append(f"{message.role.capitalize()}: {text[:TRANSCRIPT_LINE_CHARS]}")
        if len(lines) == TRANSCRIPT_MESSAGES:
            break
    if not any(line.startswith("User:") for line in lines):
        return ""
    return "\n".join(lines)


def clean_title(text: str) -> str | None:
    """A model's answer as a title: thinking removed, no quotes or colons, at most 80 chars.

    >>> clean_title('<think>hmm</think> "Title: Fixing a leaking tap"')
    'Fixing a leaking tap'
    """
    text = _LABEL.sub("", _THINK.sub("", text).strip()).translate(_QUOTES)
    text = " ".join(text.split()).strip(" '‘’.-")
    if len(text) > MAX_TITLE_CHARS:
        cut = text[:MAX_TITLE_CHARS + 1].rsplit(" ", 1)[0]
        text = (cut if len(cut) >= MAX_TITLE_CHARS // 2 else text[:MAX_TITLE_CHARS]).rstrip()
    return text or None


def generate_title(model: Any, messages: Iterable[Message | Mapping[str, Any]], *,
                   instructions: str | None = None) -> str | None:
    """A title for the conversation, or None when there is nothing to name or the model fails.

    >>> from threadrecall.models import ScriptedModel
    >>> model = ScriptedModel(["Leaking kitchen tap"])
    >>> generate_title(model, [{"role": "user", "content": "My tap leaks"}])
    'Leaking kitchen tap'
    """
    try:
        return run_sync(_title(model, messages, instructions))
    except Exception as exc:  # a title is optional: log and keep the old one
        log.warning("title generation failed: %s", exc)
        return None


async def agenerate_title(model: Any, messages: Iterable[Message | Mapping[str, Any]], *,
                          instructions: str | None = None) -> str | None:
    """The async twin of ``generate_title``."""
    try:
        return await run_async(_title(model, messages, instructions))
    except Exception as exc:
        log.warning("title generation failed: %s", exc)
        return None


def _title(model: Any, messages: Iterable[Message | Mapping[str, Any]],
           instructions: str | None) -> Program[str | None]:
    transcript = title_transcript(messages)
    if not transcript:
        return None
    model = resolve_model(model)
    prompt = [{"role": "system", "content": (instructions or DEFAULT_TITLE_INSTRUCTIONS).strip()},
              {"role": "user", "content": f"Conversation:\n{transcript}\n\nTitle:"}]
    generation = yield ModelCall(model, prompt)
    return clean_title(generation.text)


class Titler:
    """Names untitled threads in the background after messages are saved (``generate_title``).

    A thread gets a title once it has ``min_messages`` user messages; a failure is logged and
    the thread stays untitled, to be tried again after its next save.
    """

    def __init__(self, model: Any, *, instructions: str | None = None, min_messages: int = 1) -> None:
        self.model = resolve_model(model)
        self.instructions = instructions
        self.min_messages = min_messages
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="threadrecall-titles")
        self._pending: set[Future[None]] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, value: Any) -> Titler | None:
        """From ``MemoryConfig.generate_title``: False, or ``{"model", "instructions"?, "min_messages"?}``."""
        if not value:
            return None
        if not isinstance(value, Mapping) or value.get("model") is None:
            raise ConfigurationError(
                "generate_title needs a model: generate_title={'model': 'openai/gpt-5-mini'} "
                "or a LanguageModel instance"
            )
        unknown = set(value) - {"model", "instructions", "min_messages"}
        if unknown:
            raise ConfigurationError(f"unknown generate_title option(s): {', '.join(sorted(unknown))}")
        minimum = value.get("min_messages", 1)
        if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 1:
            raise ConfigurationError(f"generate_title.min_messages must be a positive integer, got {minimum!r}")
        return cls(value["model"], instructions=value.get("instructions"), min_messages=minimum)

    def schedule(self, storage: Any, threads: Iterable[Any]) -> None:
        for thread in threads:
            future = self._pool.submit(self._name, storage, thread.id)
            with self._lock:
                self._pending.add(future)
            future.add_done_callback(self._done)

    def settle(self, timeout: float | None = None) -> None:
        with self._lock:
            pending = list(self._pending)
        wait(pending, timeout=timeout)

    def _done(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)

    def _name(self, storage: Any, thread_id: str) -> None:
        thread = storage.get_thread(thread_id)
        if thread is None or thread.title:
            return
        first = storage.thread_messages(thread_id)[:TRANSCRIPT_MESSAGES * 4]
        if sum(m.role == "user" for m in first) < self.min_messages:
            return
        title = generate_title(self.model, first, instructions=self.instructions)
        if title and not (storage.get_thread(thread_id) or thread).title:
            storage.update_thread(thread_id, title=title)
