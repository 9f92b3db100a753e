"""Working memory: what the assistant keeps about a user (resource scope) or one thread
(thread scope) across turns, as Markdown following a template or as JSON following a schema.

Resource-scoped memory lives in the resource row, thread-scoped memory in the thread's
metadata under ``working_memory``. ``merge`` (schema mode) is a read-merge-write inside one
database transaction, so concurrent merges never lose a key.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .config import WorkingMemoryConfig
from .errors import (
    ConfigurationError,
    InvalidArgumentError,
    ResourceMismatchError,
    ThreadNotFoundError,
)
from .types import Message, MessageContent, check_json, check_name, check_text
from .value_schema import ValueSchema

__all__ = [
    "DEFAULT_TEMPLATE",
    "DEFAULT_TEMPLATE_FIELDS",
    "THREAD_METADATA_KEY",
    "UPDATE_TOOL_NAME",
    "WorkingMemory",
    "deep_merge",
    "render_system_message",
    "strip_working_memory",
    "strip_working_memory_tags",
]

DEFAULT_TEMPLATE_FIELDS = ("First Name", "Last Name", "Location", "Occupation", "Interests",
                           "Goals", "Events", "Facts", "Projects")
# Each field line ends in ": " (an empty value waiting to be filled in).
DEFAULT_TEMPLATE = "# User Information\n" + "".join(
    f"- **{field}**: \n" for field in DEFAULT_TEMPLATE_FIELDS)
THREAD_METADATA_KEY = "working_memory"
UPDATE_TOOL_NAME = "updateWorkingMemory"
NOT_ENABLED = "Working memory is not enabled for this memory instance"
NO_RESOURCE = ("Memory error: Resource-scoped working memory is enabled but no resource_id was "
               "provided. Either provide a resource_id or explicitly set working_memory.scope "
               "to 'thread'.")
EMPTY_TEMPLATE_SKIPPED = ("Attempted to replace existing working memory with empty template. "
                          "Update skipped to prevent data loss.")
_TAGS = re.compile(r"<working_memory>.*?</working_memory>", re.DOTALL)


class WorkingMemory:
    """Read, replace and merge working memory kept in a storage backend.

    ``storage`` is any ``Storage``: read-modify-write cycles run in one of its transactions,
    locked on the working memory's key so that they serialise across processes.
    """

    def __init__(self, storage: Any, config: WorkingMemoryConfig | Mapping[str, Any] | None = None
                 ) -> None:
        if config is None:
            config = WorkingMemoryConfig()
        elif isinstance(config, Mapping):
            config = WorkingMemoryConfig(**config)
        self.storage = storage
        self.config = config
        self.schema = None
        if config.schema is not None:
            try:
                self.schema = ValueSchema(config.schema)
            except TypeError as exc:
                raise ConfigurationError(f"working_memory.schema is not usable: {exc}") from None

    @property
    def enabled(self) -> bool:
        return bool(self.config.enabled)

    # ------------------------------------------------------------------ template

    def template(self) -> dict[str, str] | None:
        """``{"format": "json"|"markdown", "content": ...}``, or None when disabled.

        >>> WorkingMemory(None, {"enabled": True}).template()["content"].splitlines()[0]
        '# User Information'
        """
        if not self.enabled:
            return None
        if self.schema is not None:
            return {"format": "json", "content": json.dumps(self.schema.json_schema())}
        return {"format": "markdown", "content": (self.config.template or DEFAULT_TEMPLATE).strip()}

    # ------------------------------------------------------------------ read and write

    def get(self, thread_id: str, *, resource_id: str | None = None) -> str | None:
        """The stored working memory, or None when there is none."""
        self._guard(thread_id, resource_id)
        text = self._read(thread_id, resource_id)
        return text if text and text.strip() else None

    def update(self, thread_id: str, text: str, *, resource_id: str | None = None) -> None:
        """Replace the working memory with ``text``."""
        self._guard(thread_id, resource_id)
        if not isinstance(text, str):
            raise InvalidArgumentError("working_memory must be a string")
        check_text(text, "working_memory")
        with self.storage.transaction():
            self._write(thread_id, resource_id, text)

    def merge(self, thread_id: str, patch: Mapping[str, Any] | str, *,
              resource_id: str | None = None) -> dict[str, Any]:
        """Deep-merge ``patch`` into schema-mode working memory and return the result.

        ``None`` deletes a key (nested keys too), objects merge, lists and scalars replace. A
        stored value that is not a JSON object is replaced. Atomic: read, merge and write
        happen in one transaction.
        """
        self._guard(thread_id, resource_id)
        if self.schema is None:
            raise ConfigurationError(
                "merging working memory needs a working_memory.schema (JSON mode); Markdown "
                "working memory is replaced with update_working_memory")
        patch = _as_object(patch)
        if not callable(getattr(self.storage, "transaction", None)):
            raise ConfigurationError(
                "merging working memory atomically is not supported by this storage adapter "
                "(it needs storage.transaction())")
        with self.storage.transaction(lock=self._key(thread_id, resource_id)):
            merged = deep_merge(_stored_object(self._read(thread_id, resource_id)), patch)
            self._write(thread_id, resource_id, json.dumps(merged, ensure_ascii=False))
        return merged

    def apply_tool_update(self, thread_id: str, memory: Any, *,
                          resource_id: str | None = None) -> dict[str, Any]:
        """What an ``updateWorkingMemory`` tool call does: merge in schema mode; in Markdown
        mode replace, unless the new text is the empty template while real data exists.

        Returns ``{"success": bool, "message": str}``.
        """
        if self.schema is not None:
            self.merge(thread_id, memory, resource_id=resource_id)
            return {"success": True, "message": "Working memory updated."}
        self._guard(thread_id, resource_id)
        if not isinstance(memory, str):
            raise InvalidArgumentError("working memory must be a string in Markdown mode")
        template = _normalise(self.template()["content"])  # type: ignore[index]
        with self.storage.transaction(lock=self._key(thread_id, resource_id)):
            current = self._read(thread_id, resource_id) or ""
            has_data = bool(current.strip()) and _normalise(current) != template
            if has_data and _normalise(memory) == template:
                return {"success": False, "message": EMPTY_TEMPLATE_SKIPPED}
            self._write(thread_id, resource_id, memory)
        return {"success": True, "message": "Working memory updated."}

    def _key(self, thread_id: str, resource_id: str | None) -> str:
        """The lock key of the working memory a call reads and writes."""
        if self.config.scope == "resource":
            return f"working-memory:resource:{resource_id}"
        return f"working-memory:thread:{thread_id}"

    async def aget(self, thread_id: str, *, resource_id: str | None = None) -> str | None:
        """The async twin of ``get``."""
        return await asyncio.to_thread(self.get, thread_id, resource_id=resource_id)

    async def aupdate(self, thread_id: str, text: str, *, resource_id: str | None = None) -> None:
        """The async twin of ``update``."""
        await asyncio.to_thread(self.update, thread_id, text, resource_id=resource_id)

    async def amerge(self, thread_id: str, patch: Mapping[str, Any] | str, *,
                     resource_id: str | None = None) -> dict[str, Any]:
        """The async twin of ``merge``."""
        return await asyncio.to_thread(self.merge, thread_id, patch, resource_id=resource_id)

    # ------------------------------------------------------------------ system message

    def system_message(self, thread_id: str, *, resource_id: str | None = None,
                       read_only: bool = False) -> str | None:
        """The system instruction that shows the model its working memory (None if disabled)."""
        if not self.enabled:
            return None
        data = self.get(thread_id, resource_id=resource_id)
        return render_system_message(self.template(), data, read_only=read_only,  # type: ignore[arg-type]
                                     skeleton=self.schema.skeleton() if self.schema else None)

    # ------------------------------------------------------------------ internals

    def _guard(self, thread_id: str, resource_id: str | None) -> None:
        if not self.enabled:
            raise ConfigurationError(NOT_ENABLED)
        if not isinstance(thread_id, str) or not thread_id.strip():
            raise InvalidArgumentError("thread_id must be a non-empty string")
        check_name(thread_id, "thread_id")
        if resource_id is not None:
            if not isinstance(resource_id, str):
                raise InvalidArgumentError("resource_id must be a string")
            check_name(resource_id, "resource_id")
        if self.config.scope == "resource" and not resource_id:
            raise ConfigurationError(NO_RESOURCE)
        if resource_id:
            thread = self.storage.get_thread(thread_id)
            if thread is not None and thread.resource_id != resource_id:
                raise ResourceMismatchError(
                    f"Thread with id {thread_id} is for resource with id {thread.resource_id} "
                    f"but resource {resource_id} was queried.")

    def _read(self, thread_id: str, resource_id: str | None) -> str | None:
        if self.config.scope == "resource":
            resource = self.storage.get_resource(resource_id)
            return None if resource is None else resource.working_memory
        thread = self.storage.get_thread(thread_id)
        value = None if thread is None else (thread.metadata or {}).get(THREAD_METADATA_KEY)
        return value if isinstance(value, str) else None

    def _write(self, thread_id: str, resource_id: str | None, text: str) -> None:
        if self.config.scope == "resource":
            self.storage.update_resource(resource_id, working_memory=text)
            return
        if self.storage.get_thread(thread_id) is None:
            raise ThreadNotFoundError(f"Thread {thread_id} not found")
        self.storage.update_thread(thread_id, metadata={THREAD_METADATA_KEY: text})


def deep_merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``patch`` into ``base``: None deletes, objects recurse, anything else replaces.

    >>> deep_merge({"a": {"x": 1, "y": 2}, "l": [1], "k": 1}, {"a": {"y": None}, "l": [2], "n": 0})
    {'a': {'x': 1}, 'l': [2], 'k': 1, 'n': 0}
    """
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            current = out.get(key)
            out[key] = deep_merge(current if isinstance(current, Mapping) else {}, value)
        else:
            out[key] = value
    return out


def render_system_message(template: Mapping[str, str], data: str | None, *,
                          read_only: bool = False, skeleton: Any = None) -> str:
    """The working-memory system instruction for a template and the current data."""
    data = data or ""
    if read_only:
        return ("WORKING MEMORY (read-only)\n"
                "Below is what is known about the user from earlier conversations. Use it to "
                "personalise your answers and to avoid asking for things you already know. It "
                "cannot be changed in this conversation, so do not try to update it.\n\n"
                f"<working_memory_data>\n{data}\n</working_memory_data>")
    if template.get("format") == "json":
        shape = json.dumps(skeleton if skeleton is not None else {}, ensure_ascii=False, indent=2)
        how = (f"call the {UPDATE_TOOL_NAME} tool with a JSON object holding only the fields "
               "that changed; they are merged into the memory. Set a field to null to remove "
               "it. Lists are replaced as a whole.")
        layout = ("The memory is a JSON object of this shape:\n"
                  f"<working_memory_template>\n{shape}\n</working_memory_template>")
    else:
        how = (f"call the {UPDATE_TOOL_NAME} tool with the complete updated memory, following "
               "the template; it replaces the previous version, so keep everything still true.")
        layout = ("The memory follows this template:\n"
                  f"<working_memory_template>\n{template.get('content', '')}\n"
                  "</working_memory_template>")
    return (
        "WORKING MEMORY\n"
        "You keep a working memory about the user: facts that stay true across conversations, "
        "such as their name, location, preferences, goals and ongoing projects.\n\n"
        "Guidelines:\n"
        f"1. When the user shares something worth remembering, {how}\n"
        "2. Keep what is already there unless the user corrects it.\n"
        "3. Update silently: do not tell the user that you update your memory.\n"
        "4. Never write <working_memory> tags in your replies.\n"
        "5. Use the memory to personalise answers and to avoid asking for what you know.\n\n"
        f"{layout}\n\n"
        f"<working_memory_data>\n{data}\n</working_memory_data>"
    )


def strip_working_memory_tags(text: str) -> str:
    """Remove ``<working_memory>…</working_memory>`` blocks and trim.

    >>> strip_working_memory_tags("Hello <working_memory>secret</working_memory> world")
    'Hello  world'
    """
    return _TAGS.sub("", text).strip()


def strip_working_memory(message: Message) -> Message | None:
    """``message`` without working-memory data: tags stripped from its text parts and text,
    ``updateWorkingMemory`` tool parts removed; None when nothing is left.

    A message with nothing to strip is returned unchanged (the same object).
    """
    parts: list[dict[str, Any]] = []
    changed = False
    for part in message.content.parts:
        if _is_update_tool_part(part):
            changed = True
            continue
        text = part.get("text")
        if part.get("type") == "text" and isinstance(text, str) and _TAGS.search(text):
            changed = True
            text = strip_working_memory_tags(text)
            if not text:
                continue
            part = {**part, "text": text}
        parts.append(part)
    text = message.content.text
    if isinstance(text, str) and _TAGS.search(text):
        changed = True
        text = strip_working_memory_tags(text) or None
    if not changed:
        return message
    if not parts and not (text and text.strip()):
        return None
    return replace(message, content=MessageContent(parts=parts, text=text))


def _is_update_tool_part(part: Mapping[str, Any]) -> bool:
    if part.get("type") == f"tool-{UPDATE_TOOL_NAME}":
        return True
    if part.get("type") != "tool-invocation":
        return False
    call = part.get("tool_invocation") or part.get("toolInvocation") or {}
    return (call.get("tool_name") or call.get("toolName")) == UPDATE_TOOL_NAME


def _as_object(patch: Any) -> dict[str, Any]:
    if isinstance(patch, str):
        try:
            patch = json.loads(patch)
        except ValueError as exc:
            raise InvalidArgumentError(
                f"Failed to parse working memory input as JSON: {exc}") from None
    if not isinstance(patch, Mapping):
        raise InvalidArgumentError("a working memory patch must be a JSON object (a dict)")
    patch = dict(patch)
    check_json(patch, "working memory patch")
    return patch


def _stored_object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _normalise(text: str) -> str:
    return " ".join(text.split())
