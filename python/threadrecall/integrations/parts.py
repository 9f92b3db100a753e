"""``PartCodec``: a framework's content parts as the library's own parts, losslessly.

A framework part becomes a native part (``text``, ``file``, ``reasoning``, ...) holding, under
the library's names, the fields the library understands; what is left of the framework part
stays under the framework's key on the native part, so the framework part can be rebuilt
exactly. A part the library has no type for is kept whole in a ``data-<framework>`` part.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PartCodec"]

# a field's path inside a framework part: ("text",), or ("image_url", "url") for a nested one
Path = tuple[str, ...]


class PartCodec:
    """Encodes a framework's parts (dicts keyed by ``type``) as native parts and back.

    ``table`` maps a framework part type (read from its ``tag`` field) to the native type and
    the moved fields, ``{native path: framework path}``; a path is a key, or a tuple of keys for
    a nested field. ``fixed`` adds constant native fields for a framework type.

    >>> codec = PartCodec("fw", {"input_text": ("text", {"text": ("text",)})})
    >>> codec.encode({"type": "input_text", "text": "Hi", "lang": "en"})
    {'type': 'text', 'text': 'Hi', 'fw': {'type': 'input_text', 'lang': 'en'}}
    >>> codec.decode(codec.encode({"type": "input_text", "text": "Hi", "lang": "en"}))
    {'type': 'input_text', 'lang': 'en', 'text': 'Hi'}
    >>> codec.encode({"type": "audio", "data": "UklG"})
    {'type': 'data-fw', 'fw': {'type': 'audio', 'data': 'UklG'}}
    """

    def __init__(self, key: str, table: Mapping[str, tuple[str, Mapping[Path | str, Path | str]]],
                 *, tag: str = "type", fixed: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.key = key
        self.tag = tag
        self.table = {kind: (ours, {_path(a): _path(b) for a, b in moved.items()})
                      for kind, (ours, moved) in table.items()}
        self.fixed = dict(fixed or {})
        self.other = "data-" + key.replace("_", "-")

    def encode(self, part: Mapping[str, Any]) -> dict[str, Any]:
        """The native part keeping ``part``."""
        tag = str(part.get(self.tag))
        kind, moved = self.table.get(tag, (self.other, {}))
        rest = _copied(part)
        native: dict[str, Any] = {"type": kind, **_copied(self.fixed.get(tag, {}))}
        for ours, theirs in moved.items():
            holder = _holder(rest, theirs)
            if holder is not None:
                _place(native, ours, holder.pop(theirs[-1]))
        native[self.key] = rest
        return native

    def decode(self, part: Mapping[str, Any]) -> dict[str, Any] | None:
        """The framework part a native part keeps, or None when this codec did not write it."""
        rest = part.get(self.key)
        if not isinstance(rest, Mapping):
            return None
        out = _copied(rest)
        for ours, theirs in self.table.get(str(out.get(self.tag)), (self.other, {}))[1].items():
            holder = _holder(part, ours)
            if holder is not None:
                _place(out, theirs, holder[ours[-1]])
        return out


def _copied(part: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a part whose dicts and lists are its own (what a deep copy gives, for JSON
    values, several times faster than ``copy.deepcopy``)."""
    return {k: _copy(v) for k, v in part.items()}


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return value


def _path(path: Path | str) -> Path:
    return (path,) if isinstance(path, str) else tuple(path)


def _holder(part: Any, path: Path) -> dict[str, Any] | None:
    """The dict in ``part`` that holds the field at ``path``, or None when it is absent."""
    holder: Any = part
    for step in path[:-1]:
        holder = holder.get(step) if isinstance(holder, Mapping) else None
    return holder if isinstance(holder, Mapping) and path[-1] in holder else None  # type: ignore[return-value]


def _place(target: dict[str, Any], path: Path, value: Any) -> None:
    for step in path[:-1]:
        target = target.setdefault(step, {})
    target[path[-1]] = value
