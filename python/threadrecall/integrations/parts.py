"""``PartCodec``: a framework's content parts as the library's own parts, losslessly.

A framework part becomes a native part (``text``, ``file``, ``reasoning``, ...) holding, under
the library's names, the fields the library understands; what is left of the framework part
stays under the framework's key on the native part, so the framework part can be rebuilt
exactly. A part the library has no type for is kept whole in a ``data-<framework>`` part.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["PartCodec"]

# a field's path inside a framework part: ("text",), or ("image_url", "url") for a nested one
Path = tuple[str, ...]


class PartCodec:
    """Encodes a framework's parts (dicts keyed by ``type``) as native parts and back.

    ``table`` maps a framework part type to the native type and the moved fields
    (``{native key: path in the framework part}``).

    >>> codec = PartCodec("fw", {"input_text": ("text", {"text": ("text",)})})
    >>> codec.encode({"type": "input_text", "text": "Hi", "lang": "en"})
    {'type': 'text', 'text': 'Hi', 'fw': {'type': 'input_text', 'lang': 'en'}}
    >>> codec.decode(codec.encode({"type": "input_text", "text": "Hi", "lang": "en"}))
    {'type': 'input_text', 'lang': 'en', 'text': 'Hi'}
    >>> codec.encode({"type": "audio", "data": "UklG"})
    {'type': 'data-fw', 'fw': {'type': 'audio', 'data': 'UklG'}}
    """

    def __init__(self, key: str, table: Mapping[str, tuple[str, Mapping[str, Path]]]) -> None:
        self.key = key
        self.table = table
        self.other = "data-" + key.replace("_", "-")

    def encode(self, part: Mapping[str, Any]) -> dict[str, Any]:
        """The native part keeping ``part``."""
        kind, moved = self.table.get(part.get("type"), (self.other, {}))  # type: ignore[arg-type]
        rest = copy.deepcopy(dict(part))
        native: dict[str, Any] = {"type": kind}
        for ours, path in moved.items():
            holder = _holder(rest, path)
            if holder is not None:
                native[ours] = holder.pop(path[-1])
        native[self.key] = rest
        return native

    def decode(self, part: Mapping[str, Any]) -> dict[str, Any] | None:
        """The framework part a native part keeps, or None when this codec did not write it."""
        rest = part.get(self.key)
        if not isinstance(rest, Mapping):
            return None
        out = copy.deepcopy(dict(rest))
        for ours, path in self.table.get(out.get("type"), (self.other, {}))[1].items():
            if ours in part:
                holder = out
                for step in path[:-1]:
                    holder = holder.setdefault(step, {})
                holder[path[-1]] = part[ours]
        return out


def _holder(part: dict[str, Any], path: Path) -> dict[str, Any] | None:
    """The dict in ``part`` that holds the field at ``path``, or None when it is absent."""
    holder: Any = part
    for step in path[:-1]:
        holder = holder.get(step) if isinstance(holder, dict) else None
    return holder if isinstance(holder, dict) and path[-1] in holder else None
