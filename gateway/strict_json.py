"""The one strict JSON reader of every request body, query and path.

Python's ``json`` takes things the contract refuses and chokes on others with
errors that are not "bad input": ``NaN``/``Infinity`` (and ``1e999``, which it
reads as infinity), integers of thousands of digits (``ValueError`` past 4300
digits, an unbounded int before), NUL characters and lone surrogates (which
PostgreSQL then refuses deep inside a transaction), nesting deep enough for a
``RecursionError``, and bodies in UTF-16 or UTF-32 (it guesses the encoding).
:func:`loads` refuses each of them with :class:`StrictJsonError`, naming the
field where one can be named; the gateway answers 400 ``VALIDATION_ERROR``.

Bounds (documented in the contract and ``docs/architecture.md``):
nesting depth :data:`MAX_DEPTH`, integers within signed 64 bits, floats finite.
"""

from __future__ import annotations

import json
import math

MAX_DEPTH = 32
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
_INT_DIGITS = 20  # a longer literal cannot fit in 64 bits: refuse before int() parses it


class StrictJsonError(ValueError):
    def __init__(self, field: str, why: str):
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


def _constant(name: str):
    raise StrictJsonError("body", f"{name} is not JSON")


class _BeyondInt64:
    """Stands in for an integer literal beyond 64 bits until :func:`check`,
    which knows the field it sits in (the parser's hook does not)."""

    __slots__ = ()


_BEYOND_INT64 = _BeyondInt64()


def _int(literal: str) -> int | _BeyondInt64:
    digits = literal.lstrip("-")
    if len(digits) > _INT_DIGITS or not INT_MIN <= (value := int(literal)) <= INT_MAX:
        return _BEYOND_INT64
    return value


def _float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise StrictJsonError("body", f"the number {literal[:40]} is out of range")
    return value


def bad_text(value: str) -> str | None:
    """Why a string may not enter the system, or None."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate"
    return None


def _field(path: list) -> str:
    return ".".join(str(p) for p in path) or "body"


def check(value, max_depth: int = MAX_DEPTH) -> None:
    """Depth, every integer within 64 bits, and every string (keys too) free
    of NUL and lone surrogates; iterative, so no input can exhaust the stack."""
    stack = [(value, [], 1)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict):
            if depth > max_depth:
                raise StrictJsonError(_field(path), f"nested deeper than {max_depth} levels")
            for key, item in node.items():
                why = bad_text(key)
                if why:
                    raise StrictJsonError(_field(path + [repr(key)[:40]]), f"the key {why}")
                stack.append((item, path + [key], depth + 1))
        elif isinstance(node, list):
            if depth > max_depth:
                raise StrictJsonError(_field(path), f"nested deeper than {max_depth} levels")
            for i, item in enumerate(node):
                stack.append((item, path + [i], depth + 1))
        elif isinstance(node, str):
            why = bad_text(node)
            if why:
                raise StrictJsonError(_field(path), why)
        elif node is _BEYOND_INT64:
            raise StrictJsonError(_field(path), "an integer beyond 64 bits")


def loads(data: bytes | str):
    """Parse a request body strictly (see the module docstring)."""
    if isinstance(data, bytes | bytearray):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise StrictJsonError("body", "is not UTF-8") from None
    if data.startswith("\ufeff"):
        raise StrictJsonError("body", "starts with a byte-order mark")
    try:
        value = json.loads(data, parse_constant=_constant, parse_int=_int, parse_float=_float)
    except RecursionError:
        raise StrictJsonError("body", f"nested deeper than {MAX_DEPTH} levels") from None
    except StrictJsonError:
        raise
    except ValueError as exc:  # json.JSONDecodeError included
        raise StrictJsonError("body", f"not valid JSON ({str(exc)[:80]})") from None
    check(value)
    return value
