"""``ValueSchema``: one view over the two schema forms users give (a pydantic model class or
any type pydantic understands, or a JSON-schema dict) — validate a value, get its JSON schema.

JSON-schema dicts are checked by a small validator covering the keywords models produce and
users write (``type``, ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``anyOf``/``oneOf``/``allOf``, length, size and range
bounds, ``pattern`` and local ``$ref``); other keywords are accepted without checking.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

__all__ = ["ValueSchema", "SchemaMismatch"]


class SchemaMismatch(ValueError):
    """A value that does not match its schema."""


class ValueSchema:
    """Validate values against a pydantic type or a JSON-schema dict.

    >>> ValueSchema({"type": "integer"}).validate(7)
    7
    >>> ValueSchema(int).json_schema()
    {'type': 'integer'}
    """

    def __init__(self, schema: Any) -> None:
        self.source = schema
        if isinstance(schema, Mapping):
            self._adapter = None
            self._json = dict(schema)
        else:
            try:
                self._adapter = TypeAdapter(schema)
                self._json = self._adapter.json_schema()
            except Exception as exc:  # pydantic raises several kinds for unusable types
                raise TypeError(f"not a usable schema: {schema!r} ({exc})") from None

    @property
    def is_model(self) -> bool:
        """True for a pydantic model class (validated values are model instances)."""
        return isinstance(self.source, type) and issubclass(self.source, BaseModel)

    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the values."""
        return dict(self._json)

    def validate(self, value: Any) -> Any:
        """Return the validated value or raise ``SchemaMismatch`` saying where it differs."""
        if self._adapter is not None:
            try:
                return self._adapter.validate_python(value)
            except ValidationError as exc:
                details = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}"
                    for e in exc.errors())
                raise SchemaMismatch(details) from None
        problems = _check(value, self._json, "value", self._json)
        if problems:
            raise SchemaMismatch("; ".join(problems[:5]))
        return value

    def dump(self, value: Any) -> Any:
        """A JSON-ready form of a validated value (models become dicts)."""
        if self._adapter is not None:
            return self._adapter.dump_python(value, mode="json")
        return value

    def skeleton(self) -> Any:
        """An empty instance shape: objects with their properties, "" strings, [] arrays."""
        return _skeleton(self._json, self._json, 0)


_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    and math.isfinite(v),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, (list, tuple)),
    "object": lambda v: isinstance(v, Mapping),
}


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    seen = 0
    while isinstance(schema, Mapping) and "$ref" in schema and seen < 32:
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            return {}
        target: Any = root
        for part in ref.lstrip("#").strip("/").split("/"):
            if part:
                target = target.get(part.replace("~1", "/").replace("~0", "~"), {}) \
                    if isinstance(target, Mapping) else {}
        schema, seen = target, seen + 1
    return schema if isinstance(schema, Mapping) else {}


def _check(value: Any, schema: Any, where: str, root: Mapping[str, Any]) -> list[str]:
    if schema is True or schema is None:
        return []
    if schema is False:
        return [f"{where}: not allowed"]
    schema = _resolve(schema, root)
    problems: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if schema.get("nullable"):
            kinds = [*kinds, "null"]
        if not any(_TYPES.get(k, lambda v: True)(value) for k in kinds):
            return [f"{where}: expected {' or '.join(kinds)}, got {_describe(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} is not one of {schema['enum']!r}")
    if "const" in schema and value != schema["const"]:
        problems.append(f"{where}: expected {schema['const']!r}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            problems.append(f"{where}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{where}: longer than {schema['maxLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{where}: does not match pattern {schema['pattern']!r}")
    if _TYPES["number"](value):
        for key, ok in (("minimum", lambda b: value >= b), ("maximum", lambda b: value <= b),
                        ("exclusiveMinimum", lambda b: value > b),
                        ("exclusiveMaximum", lambda b: value < b)):
            bound = schema.get(key)
            if _TYPES["number"](bound) and not ok(bound):
                problems.append(f"{where}: {value!r} violates {key} {bound!r}")
    if isinstance(value, (list, tuple)):
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{where}: more than {schema['maxItems']} items")
        items = schema.get("items")
        if isinstance(items, (Mapping, bool)):
            for i, item in enumerate(value):
                problems += _check(item, items, f"{where}[{i}]", root)
    if isinstance(value, Mapping):
        props = schema.get("properties") or {}
        for key in schema.get("required") or ():
            if key not in value:
                problems.append(f"{where}: missing required property {key!r}")
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                problems += _check(item, props[key], f"{where}.{key}", root)
            else:
                problems += _check(item, extra, f"{where}.{key}", root)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if options:
            matches = sum(not _check(value, option, where, root) for option in options)
            if matches == 0 or (key == "oneOf" and matches > 1):
                which = "any" if key == "anyOf" else "exactly one"
                problems.append(f"{where}: does not match {which} of the allowed forms")
    for option in schema.get("allOf") or ():
        problems += _check(value, option, where, root)
    return problems


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    name = {bool: "boolean", str: "string", int: "integer", float: "number", list: "array",
            tuple: "array", dict: "object"}.get(type(value), type(value).__name__)
    return f"{name} {value!r}"[:80]


def _skeleton(schema: Any, root: Mapping[str, Any], depth: int) -> Any:
    schema = _resolve(schema, root) if isinstance(schema, Mapping) else {}
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
    if (kind == "object" or "properties" in schema) and depth < 8:
        properties = schema.get("properties") or {}
        return {k: _skeleton(v, root, depth + 1) for k, v in properties.items()}
    if kind == "array":
        return []
    if kind == "string":
        return ""
    return None
