"""The parsers every area's settings share, and the error they raise: one line
naming the variable (``linectl`` prints it and exits with status 2)."""

from __future__ import annotations

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
