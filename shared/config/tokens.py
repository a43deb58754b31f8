"""Access tokens: who a bearer token belongs to (role and name), read from
``LINECTL_TOKENS``, a tokens file (``LINECTL_TOKENS_FILE``), or generated
once into the data directory."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from .parse import PREFIX, ROLES, SettingsError, expanded_path, setting

# The example file's values: a deployment that copied it unchanged is refused.
PLACEHOLDER_MARKERS = ("change-me", "changeme", "placeholder", "example", "xxxxxxxx")
MIN_TOKEN_LENGTH = 16


@dataclasses.dataclass(frozen=True)
class TokenHolder:
    """Who a bearer token belongs to: its role, and the name audit rows record."""

    role: str
    name: str


def _holder(name: str, item: str) -> tuple[str, TokenHolder]:
    """One ``role:token`` or ``role:name:token`` pair, checked."""
    parts = [p.strip() for p in item.split(":")]
    if len(parts) == 2:
        role, holder, token = parts[0], parts[0], parts[1]
    elif len(parts) == 3:
        role, holder, token = parts
    else:
        raise SettingsError(f"{PREFIX}{name}: expected role:token or role:name:token, separated by commas")
    if not token or not holder:
        raise SettingsError(f"{PREFIX}{name}: expected role:token or role:name:token, separated by commas")
    if role not in ROLES:
        raise SettingsError(
            f"{PREFIX}{name}: unknown role {role!r} (roles: {', '.join(ROLES)})"
        )
    if len(token) < MIN_TOKEN_LENGTH:
        raise SettingsError(f"{PREFIX}{name}: the {role} token of {holder} is shorter than"
                            f" {MIN_TOKEN_LENGTH} characters")
    if any(marker in token.lower() for marker in PLACEHOLDER_MARKERS):
        raise SettingsError(f"{PREFIX}{name}: the {role} token of {holder} is the example's placeholder;"
                            " generate one (e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(24))')")
    if len(holder) > 64 or not all(c.isalnum() or c in "-_.@" for c in holder):
        raise SettingsError(f"{PREFIX}{name}: token names use letters, digits and -_.@ (at most 64)")
    return token, TokenHolder(role, holder)


def parse_tokens(name: str, raw: str) -> dict[str, TokenHolder]:
    """``role:token`` or ``role:name:token`` pairs, comma-separated."""
    tokens: dict[str, TokenHolder] = {}
    for item in filter(None, (p.strip() for p in raw.split(","))):
        token, holder = _holder(name, item)
        if token in tokens:
            raise SettingsError(f"{PREFIX}{name}: the same token is given twice")
        tokens[token] = holder
    if not tokens:
        raise SettingsError(f"{PREFIX}{name}: no role:token pair given")
    return tokens


def parse_tokens_file(name: str, text: str) -> dict[str, TokenHolder]:
    """A tokens file: ``role:token`` or ``role:name:token`` pairs, separated by
    commas or newlines; blank lines and lines starting with ``#`` are ignored."""
    lines = (line.strip() for line in text.splitlines())
    return parse_tokens(name, ",".join(line for line in lines if line and not line.startswith("#")))


def read_tokens_file(path: Path, name: str = "TOKENS_FILE") -> dict[str, TokenHolder]:
    """The tokens ``path`` holds; :class:`SettingsError` naming the variable and the
    path when it cannot be read or parsed."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{PREFIX}{name}: cannot read {path}: {exc.__class__.__name__}") from None
    return parse_tokens_file(f"{name} ({path})", text)


def tokens_from_file(values: dict) -> None:
    """``LINECTL_TOKENS_FILE`` read into ``values['tokens']`` (not both may be set)."""
    if values.get("tokens_file") is not None:
        if values.get("tokens"):
            raise SettingsError(f"{PREFIX}TOKENS_FILE: set it or {PREFIX}TOKENS, not both")
        values["tokens"] = read_tokens_file(values["tokens_file"])


@dataclasses.dataclass(frozen=True)
class TokenSettings:
    tokens: Mapping[str, TokenHolder] = setting(parse=parse_tokens, default_factory=dict)  # token -> holder
    tokens_generated: bool = False
    # Where the tokens were read from (LINECTL_TOKENS_FILE, else the data directory's
    # generated file): the gateway re-reads it on change and on SIGHUP. None for
    # LINECTL_TOKENS, which changes only with a restart.
    tokens_file: Path | None = setting(None, expanded_path)

    def tokens_for(self, role: str) -> list[str]:
        return [tok for tok, holder in self.tokens.items() if holder.role == role]
