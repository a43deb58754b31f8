"""Parsing a message payload (JSON) into its frozen dataclass, field by field.

A field's wire key is ``key("camelCase")``; its type hint says what is accepted
(``int``, ``bool``, non-empty ``str`` up to :data:`MAX_TEXT`, ``dict``, tuples,
optionals); ``row_id`` marks a row id that must be >= 1; a class may add its
own ``validate()``. A bad payload raises :class:`ValidationError` naming the key.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import field
from datetime import datetime
from typing import Any

MAX_TEXT = 200
_EXPECTED = {bool: "expected true or false", dict: "expected an object"}  # what a wrong type is told


class ValidationError(ValueError):
    """A message payload is malformed; ``field`` names the culprit."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


def _checked(name: str, value: Any, tp) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _checked(name, value, inner[0])
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            # ids arrive as strings from some callers (URL paths)
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                return int(value)
            raise ValidationError(name, "expected an integer")
        return value
    if tp in _EXPECTED:
        if not isinstance(value, tp):
            raise ValidationError(name, _EXPECTED[tp])
        return value
    if tp is str:
        if not isinstance(value, str) or not value.strip():
            raise ValidationError(name, "expected a non-empty string")
        if len(value) > MAX_TEXT:
            raise ValidationError(name, f"longer than {MAX_TEXT} characters")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ValidationError(name, "expected a list")
        return tuple(_checked(f"{name}[{i}]", v, typing.get_args(tp)[0]) for i, v in enumerate(value))
    raise TypeError(tp)


@functools.cache
def _fields(cls) -> tuple[tuple[dataclasses.Field, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls))


def parse_payload(cls, payload):
    if not isinstance(payload, dict):
        raise ValidationError("payload", "expected an object")
    values = {}
    for f, hint in _fields(cls):
        wire = f.metadata.get("key", f.name)
        if wire in payload and payload[wire] is not None:
            values[f.name] = _checked(wire, payload[wire], hint)
        elif f.default is dataclasses.MISSING:
            raise ValidationError(wire, "required")
    obj = cls(**values)
    for f, _ in _fields(cls):  # after every field's type, as each class's validate() did
        if f.metadata.get("positive"):
            _positive(f.metadata["key"], getattr(obj, f.name))
    validate = getattr(obj, "validate", None)
    if validate:
        validate()
    return obj


def key(name: str, default=dataclasses.MISSING):
    """A field read from payload key ``name`` (camelCase on the wire)."""
    return field(default=default, metadata={"key": name})


def row_id(name: str):
    """A required row id (``>= 1``), e.g. ``jobId``."""
    return field(metadata={"key": name, "positive": True})


def instant(name: str, value: str | None) -> datetime | None:
    """An ISO-8601 instant with its offset (a hardware service's clock), or None."""
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(name, "expected an ISO-8601 time") from None
    if when.tzinfo is None:
        raise ValidationError(name, "expected an ISO-8601 time with its UTC offset")
    return when


def _positive(name: str, value: int | None):
    if value is not None and value < 1:
        raise ValidationError(name, "must be >= 1")
