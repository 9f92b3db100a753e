"""Thread titles: a short title written by a model from the start of a conversation.

Failures never raise: ``generate_title`` returns None and the caller keeps the old title.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .effects import ModelCall, Program, run_async, run_sync
from .models.router import resolve_model
from .summarize import coerce_messages, message_text
from .types import Message

__all__ = ["DEFAULT_TITLE_INSTRUCTIONS", "MAX_TITLE_CHARS", "generate_title",
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
