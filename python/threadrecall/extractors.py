"""Extractors: typed values pulled out of a conversation while it is summarised.

An ``Extractor`` has a name (which gives its slug), instructions, an optional schema and an
optional ``on_extracted`` hook. Its mode says where the value comes from:

- ``inline``: no schema (the value is a string) or ``mode="inline"``; the summarising model
  writes the value in a ``<slug>…</slug>`` section (or an ``<extracted-values>`` JSON block)
  of its own answer.
- ``structured``: a schema is given; the value comes from a follow-up call asking for a JSON
  object of every structured extractor.
- ``hook``: no value is extracted; ``on_extracted`` runs after the summary.

A hook's non-None return value replaces the extracted value, once it passes the schema.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .effects import Callback, ModelCall, Program
from .errors import AbortedError, ExtractorError
from .models.base import parse_json_text, raise_if_aborted
from .value_schema import SchemaMismatch, ValueSchema

__all__ = [
    "Extractor",
    "ExtractorContext",
    "ExtractedContext",
    "ResolvedExtractor",
    "InlineValues",
    "RESERVED_SLUGS",
    "slugify_extractor_name",
    "resolve_extractors",
    "inline_sections_prompt",
    "parse_inline_values",
    "structured_request",
    "extract_structured_values",
    "apply_extractor_hooks",
]

RESERVED_SLUGS = frozenset({
    "observations", "observation", "extracted-values",
    "thread", "message", "messages", "conversation", "history",
    "system", "user", "assistant", "tool",
    "current-task", "suggested-response", "thread-title",
})
MODES = ("inline", "structured", "hook")
UNSAFE_PATH_SEGMENTS = frozenset({"__proto__", "constructor", "prototype"})
VALUES_PLACEHOLDER = "Write only the extracted values JSON object here."
_STRING = ValueSchema({"type": "string"})
_VALUES_BLOCK = re.compile(r"<extracted-values>(.*?)</extracted-values>", re.DOTALL)


def slugify_extractor_name(name: str) -> str:
    """The slug of an extractor name: lower-case letters and digits joined by single dashes.

    >>> slugify_extractor_name("  Project Status ")
    'project-status'
    >>> slugify_extractor_name("---Project---Status---")
    'project-status'
    >>> slugify_extractor_name("User's `mood`")
    'users-mood'
    """
    text = re.sub(r"[\"'`]", "", name.strip().lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


@dataclass(frozen=True)
class ExtractorContext:
    """What dynamic ``instructions``/``schema`` functions receive."""

    source: str
    thread_id: str | None
    resource_id: str | None
    memory: Any = None
    request_context: Any = None


@dataclass(frozen=True)
class ExtractedContext:
    """What an ``on_extracted`` hook receives."""

    source: str
    extractor: Extractor
    thread_id: str
    resource_id: str | None
    current: Any
    previous: Any = None
    memory: Any = None
    request_context: Any = None
    abort_signal: Any = None


class Extractor:
    """A value to pull out of a conversation while summarising it.

    ``schema`` is a pydantic model class (or any type pydantic validates) or a JSON-schema
    dict; ``instructions`` and ``schema`` may also be functions of an ``ExtractorContext``.
    ``metadata_key_path`` is the dotted path where callers that persist values put this one
    (default ``extracted.<slug>``; ``False``: not persisted). ``on_extracted`` (sync or async)
    gets an ``ExtractedContext``.

    >>> e = Extractor("Project Status", instructions="The project's status.")
    >>> e.slug, e.mode, e.metadata_key_path
    ('project-status', 'inline', 'extracted.project-status')
    """

    def __init__(self, name: str, *,
                 instructions: str | Callable[[ExtractorContext], str] | None = None,
                 schema: Any = None, metadata_key_path: str | bool | None = None,
                 on_extracted: Callable[[ExtractedContext], Any] | None = None,
                 include_previous_extraction: bool = True, mode: str | None = None,
                 retry_structured_extraction_on_empty_object: bool = False) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ExtractorError("Extractor name is required.")
        slug = slugify_extractor_name(name)
        if not slug:
            raise ExtractorError(f'Extractor name "{name}" must produce a non-empty slug.')
        if not (slug[0].isalpha() and slug[-1].isalnum()):
            raise ExtractorError(
                f'Extractor name "{name}" produced invalid slug "{slug}"; a slug must start '
                "with a letter and end with a letter or digit.")
        if slug in RESERVED_SLUGS:
            raise ExtractorError(f'Extractor slug "{slug}" is reserved by threadrecall.')
        if mode is not None and mode not in MODES:
            raise ExtractorError(f'Extractor "{name}" has unknown mode {mode!r}; use one of '
                                 f"{', '.join(MODES)}.")
        if on_extracted is not None and not callable(on_extracted):
            raise ExtractorError(f'Extractor "{name}" on_extracted must be callable.')
        self.name = name
        self.slug = slug
        self.instructions = instructions
        self.on_extracted = on_extracted
        self.include_previous_extraction = bool(include_previous_extraction)
        self.retry_structured_extraction_on_empty_object = bool(
            retry_structured_extraction_on_empty_object)
        self.schema = schema
        dynamic = inspect.isroutine(schema) or isinstance(schema, functools.partial)
        self._schema = None if schema is None or dynamic else self._value_schema(schema)
        if mode is None:
            mode = "structured" if schema is not None else "inline"
        self.mode = mode
        if mode == "hook" and on_extracted is None:
            raise ExtractorError(f'Extractor "{name}" in hook mode must include on_extracted.')
        if mode == "structured" and schema is None:
            raise ExtractorError(f'Extractor "{name}" in structured mode must include a schema.')
        if mode != "hook" and not _has_text(instructions):
            raise ExtractorError(f'Extractor "{name}" must include instructions.')
        self.metadata_key_path = self._key_path(metadata_key_path)

    def __repr__(self) -> str:
        return f"Extractor({self.name!r}, mode={self.mode!r})"

    def _value_schema(self, schema: Any) -> ValueSchema:
        try:
            return ValueSchema(schema)
        except TypeError as exc:
            raise ExtractorError(f'Extractor "{self.name}" has an unusable schema: {exc}') from None

    def _key_path(self, path: str | bool | None) -> str | bool:
        if path is None:
            return f"extracted.{self.slug}"
        if path is False:
            return False
        if not isinstance(path, str) or not path.strip():
            raise ExtractorError(
                f'Extractor "{self.name}" metadata_key_path must be a dotted path or False.')
        segments = path.split(".")
        if any(s in UNSAFE_PATH_SEGMENTS for s in segments):
            raise ExtractorError(
                f'Extractor metadata_key_path "{path}" contains an unsafe path segment.')
        if not all(segments):
            raise ExtractorError(
                f'Extractor metadata_key_path "{path}" contains an empty path segment.')
        return path

    def write_to(self, metadata: Mapping[str, Any], value: Any) -> dict[str, Any]:
        """A copy of ``metadata`` with ``value`` at this extractor's ``metadata_key_path``.

        >>> Extractor("Priority", instructions="p").write_to({"a": 1}, "high")
        {'a': 1, 'extracted': {'priority': 'high'}}
        """
        out = dict(metadata)
        if self.metadata_key_path is False:
            return out
        *parents, leaf = str(self.metadata_key_path).split(".")
        node = out
        for key in parents:
            child = node.get(key)
            node[key] = dict(child) if isinstance(child, Mapping) else {}
            node = node[key]
        node[leaf] = value
        return out

    def resolve(self, context: ExtractorContext) -> ResolvedExtractor:
        """Evaluate dynamic instructions and schema for one run."""
        instructions = self.instructions
        if callable(instructions):
            instructions = instructions(context)
        if self.mode != "hook" and not _has_text(instructions):
            raise ExtractorError(f'Extractor "{self.name}" must include instructions.')
        schema = self._schema
        if schema is None and self.schema is not None:
            produced = self.schema(context)
            schema = None if produced is None else self._value_schema(produced)
        mode = self.mode
        if mode == "structured" and schema is None:
            mode = "inline"
        return ResolvedExtractor(self, (instructions or "").strip(), schema, mode)


@dataclass(frozen=True)
class ResolvedExtractor:
    """An extractor with its instructions and schema evaluated for one run."""

    extractor: Extractor
    instructions: str
    schema: ValueSchema | None
    mode: str

    @property
    def slug(self) -> str:
        return self.extractor.slug

    def check(self, value: Any) -> Any:
        """Validate a value for this extractor (inline ones without a schema take strings)."""
        schema = self.schema or (_STRING if self.mode == "inline" else None)
        return value if schema is None else schema.validate(value)


def resolve_extractors(extractors: Iterable[Extractor] | None,
                       context: ExtractorContext) -> list[ResolvedExtractor]:
    """Resolve a list of extractors, rejecting duplicate slugs."""
    seen: dict[str, Extractor] = {}
    resolved = []
    for extractor in extractors or ():
        if not isinstance(extractor, Extractor):
            raise ExtractorError(
                f"extract must hold Extractor objects, got {type(extractor).__name__}")
        if extractor.slug in seen:
            raise ExtractorError(f'Duplicate extractor slug "{extractor.slug}" from '
                                 f'"{seen[extractor.slug].name}" and "{extractor.name}".')
        seen[extractor.slug] = extractor
        resolved.append(extractor.resolve(context))
    return resolved


def inline_sections_prompt(extractors: Sequence[ResolvedExtractor]) -> str:
    """The system-prompt text that offers one optional XML section per inline extractor."""
    inline = [e for e in extractors if e.mode == "inline"]
    if not inline:
        return ""
    sections = "\n\n".join(
        f"<{e.slug}>\n{e.instructions}\nAdd this section only when the conversation holds "
        f"information for {e.slug}.\n</{e.slug}>" for e in inline)
    return ("=== OPTIONAL SECTIONS ===\n"
            "After the <observations> block you may add the sections below, each at most once, "
            "outside the observations:\n\n" + sections)


@dataclass(frozen=True)
class InlineValues:
    """Values read from a model answer, the failures, and the answer without those sections."""

    values: dict[str, Any]
    failures: list[dict[str, str]]
    text: str


def parse_inline_values(text: str, extractors: Sequence[ResolvedExtractor]) -> InlineValues:
    """Read inline extractor values from ``text`` and strip their sections from it.

    ``<extracted-values>{...}</extracted-values>`` blocks are read first; for slugs still
    missing the last ``<slug>…</slug>`` section is read, as JSON when it parses and fits the
    schema, else as the plain string.
    """
    inline = {e.slug: e for e in extractors if e.mode == "inline"}
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for block in _VALUES_BLOCK.finditer(text):
        body = block.group(1).strip()
        if not body or body == VALUES_PLACEHOLDER:
            continue
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            errors["extracted-values"] = "the <extracted-values> block is not a JSON object"
            continue
        for slug, raw in payload.items():
            if slug in inline and not is_empty_value(raw):
                _accept(inline[slug], [raw], values, errors)
    for slug, extractor in inline.items():
        if slug in values:
            continue
        matches = list(_section(slug).finditer(text))
        body = matches[-1].group(1).strip() if matches else ""
        if not body or body == VALUES_PLACEHOLDER:
            continue
        candidates: list[Any] = []
        try:
            candidates.append(json.loads(body))
        except ValueError:
            pass
        _accept(extractor, [*candidates, body], values, errors)
    stripped = _whole_lines(_VALUES_BLOCK).sub("", text)
    for slug in inline:
        stripped = _whole_lines(_section(slug)).sub("", stripped)
    stripped = re.sub(r"\n{3,}", "\n\n", stripped).strip()
    failures = [{"slug": slug, "error": error} for slug, error in errors.items()]
    return InlineValues(values, failures, stripped)


def structured_request(extractors: Sequence[ResolvedExtractor],
                       previous: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """The follow-up prompt and the JSON schema of the object it asks for."""
    structured = [e for e in extractors if e.mode == "structured"]
    properties: dict[str, Any] = {}
    definitions: dict[str, Any] = {}
    for e in structured:
        schema = e.schema.json_schema() if e.schema else {}
        definitions.update(schema.pop("$defs", {}))
        properties[e.slug] = schema
    response = {"type": "object", "properties": properties, "additionalProperties": False}
    if definitions:
        response["$defs"] = definitions
    lines = [
        "Now fill in structured values from the observations you just wrote. Reply with the "
        "requested JSON object only. Leave out any property the conversation does not support.",
        "",
        "## Extractors",
        *(f"- {e.slug}: {e.instructions}" for e in structured),
    ]
    prior = [(e.slug, (previous or {}).get(e.slug)) for e in structured
             if e.extractor.include_previous_extraction]
    prior = [(slug, value) for slug, value in prior if not is_empty_value(value)]
    if prior:
        lines += ["", "## Prior Extracted Values",
                  *(f"- {slug}: {json.dumps(value, ensure_ascii=False, default=str)}"
                    for slug, value in prior)]
    return "\n".join(lines), response


def extract_structured_values(model: Any, conversation: Sequence[Mapping[str, Any]],
                              extractors: Sequence[ResolvedExtractor], *,
                              previous: Mapping[str, Any] | None = None,
                              abort_signal: Any = None,
                              settings: Mapping[str, Any] | None = None
                              ) -> Program[tuple[dict[str, Any], list[dict[str, str]]]]:
    """Ask ``model`` (continuing ``conversation``) for the structured extractors' values.

    One retry with the schema written into the prompt; then every structured extractor gets
    a failure. An abort always propagates.
    """
    structured = [e for e in extractors if e.mode == "structured"]
    if not structured:
        return {}, []
    prompt, schema = structured_request(extractors, previous)
    retry_on_empty = any(e.extractor.retry_structured_extraction_on_empty_object
                         for e in structured)
    payload: Any = None
    error = "no structured values were returned"
    for attempt in range(2):
        raise_if_aborted(abort_signal)
        if attempt == 0:
            ask = ModelCall(model, [*conversation, {"role": "user", "content": prompt}],
                            schema, dict(settings or {}))
        else:
            text = (f"{prompt}\n\nAnswer with one JSON object and nothing else. It must match "
                    f"this JSON schema:\n{json.dumps(schema, ensure_ascii=False)}")
            ask = ModelCall(model, [*conversation, {"role": "user", "content": text}], None,
                            dict(settings or {}))
        try:
            generation = yield ask
            raise_if_aborted(abort_signal)
            payload = generation.parsed if attempt == 0 else parse_json_text(generation.text)
            if payload is None and attempt == 0:
                payload = parse_json_text(generation.text)
        except AbortedError:
            raise
        except Exception as exc:
            raise_if_aborted(abort_signal)
            payload, error = None, str(exc) or type(exc).__name__
            continue
        if not isinstance(payload, dict):
            payload, error = None, "the structured answer is not a JSON object"
            continue
        if payload or not retry_on_empty:
            break
    if not isinstance(payload, dict):
        return {}, [{"slug": e.slug, "error": error} for e in structured]
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for e in structured:
        raw = payload.get(e.slug)
        if not is_empty_value(raw):
            _accept(e, [raw], values, errors)
    return values, [{"slug": slug, "error": err} for slug, err in errors.items()]


def apply_extractor_hooks(extractors: Sequence[ResolvedExtractor], values: Mapping[str, Any],
                          failures: Sequence[Mapping[str, str]], *, source: str,
                          thread_id: str | None, resource_id: str | None, memory: Any = None,
                          request_context: Any = None, abort_signal: Any = None,
                          previous: Mapping[str, Any] | None = None
                          ) -> Program[tuple[dict[str, Any], list[dict[str, str]]]]:
    """Run each extractor's ``on_extracted`` hook; returns the final values and failures."""
    values = dict(values)
    failed = [dict(f) for f in failures]
    for e in extractors:
        hook = e.extractor.on_extracted
        if hook is None:
            continue
        current = None
        if e.mode != "hook":
            current = values.get(e.slug)
            if is_empty_value(current):
                values.pop(e.slug, None)
                continue
        context = ExtractedContext(source, e.extractor, thread_id or "", resource_id, current,
                                   (previous or {}).get(e.slug), memory, request_context,
                                   abort_signal)
        try:
            returned = yield Callback(hook, context)
        except AbortedError:
            raise
        except Exception as exc:
            if abort_signal is not None and abort_signal.is_set():
                raise
            values.pop(e.slug, None)
            failed.append({"slug": e.slug, "error": str(exc) or type(exc).__name__})
            continue
        if returned is None:
            continue
        try:
            values[e.slug] = e.check(returned)
        except SchemaMismatch as exc:
            values.pop(e.slug, None)
            failed.append({"slug": e.slug, "error": _mismatch(e.slug, exc)})
    return values, failed


def is_empty_value(value: Any) -> bool:
    """None, a blank string, or an empty list or dict: nothing was extracted."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    return isinstance(value, (list, dict, tuple)) and len(value) == 0


def _accept(extractor: ResolvedExtractor, candidates: Sequence[Any], values: dict[str, Any],
            errors: dict[str, str]) -> None:
    """Store the first candidate that passes the schema, else record why the last did not."""
    last: SchemaMismatch | None = None
    for candidate in candidates:
        try:
            values[extractor.slug] = extractor.check(candidate)
        except SchemaMismatch as exc:
            last = exc
            continue
        errors.pop(extractor.slug, None)
        return
    if last is not None:
        errors[extractor.slug] = _mismatch(extractor.slug, last)


def _mismatch(slug: str, exc: Exception) -> str:
    return f'The value for "{slug}" did not match its schema: {exc}'


def _section(slug: str) -> re.Pattern[str]:
    return re.compile(rf"<{re.escape(slug)}>(.*?)</{re.escape(slug)}>", re.DOTALL)


def _whole_lines(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """``pattern`` plus the blanks around it and one line end, so removing it leaves no gap."""
    return re.compile(rf"[ \t]*(?:{pattern.pattern})[ \t]*\n?", pattern.flags)


def _has_text(value: Any) -> bool:
    return callable(value) or (isinstance(value, str) and bool(value.strip()))

