"""The parsers every area's settings share, and the error they raise: one line
naming the variable (``linectl`` prints it and exits with status 2)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

PREFIX = "LINECTL_"
# Who a token or a person may be: the tokens and the LDAP groups both name them.
ROLES = ("operator", "platform", "runtime", "admin")


class SettingsError(ValueError):
    """A setting is missing or malformed; ``str(err)`` is one line naming it."""


def parse_int(name: str, raw: str, lo: int, hi: int) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise SettingsError(f"{PREFIX}{name}: expected an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise SettingsError(f"{PREFIX}{name}: must be between {lo} and {hi}, got {value}")
    return value


def parse_float(name: str, raw: str, lo: float, hi: float) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise SettingsError(f"{PREFIX}{name}: expected a number, got {raw!r}") from None
    if not (lo < value <= hi) or value != value:
        raise SettingsError(f"{PREFIX}{name}: must be > {lo} and <= {hi}, got {raw}")
    return value


def parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "on", "yes"):
        return True
    if value in ("0", "false", "off", "no"):
        return False
    raise SettingsError(f"{PREFIX}{name}: expected on or off, got {raw!r}")


def parse_choice(name: str, raw: str, choices: tuple[str, ...]) -> str:
    value = raw.strip()
    if value.upper() in choices:
        return value.upper()
    if value.lower() in choices:
        return value.lower()
    raise SettingsError(f"{PREFIX}{name}: expected one of {', '.join(choices)}, got {raw!r}")


# -- one declaration per setting ----------------------------------------------
# A setting is a dataclass field whose metadata holds its parser: its variable is
# LINECTL_ + the field's name in capitals, and ``parsers`` reads the table off
# the area's class (the name, the field and the parser are written once).

def setting(default=dataclasses.MISSING, parse=None, *, default_factory=dataclasses.MISSING):
    """A field read from ``LINECTL_<NAME>`` with ``parse(name, raw)``."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"parse": parse})


def parsers(area) -> dict:
    """``NAME -> (field, parser)`` for an area's settings class, in field order."""
    return {f.name.upper(): (f.name, f.metadata["parse"]) for f in dataclasses.fields(area) if "parse" in f.metadata}


def ints(lo: int, hi: int):
    return lambda name, raw: parse_int(name, raw, lo, hi)


def floats(lo: float, hi: float):
    return lambda name, raw: parse_float(name, raw, lo, hi)


def choice(choices: tuple[str, ...]):
    return lambda name, raw: parse_choice(name, raw, choices)


def stripped(name: str, raw: str) -> str:
    return raw.strip()


def verbatim(name: str, raw: str) -> str:
    return raw


def expanded_path(name: str, raw: str) -> Path:
    return Path(raw.strip()).expanduser()
