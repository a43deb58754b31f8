"""People settings: sign-in sessions, password hashing, LDAP and TLS.

``LINECTL_SESSION_IDLE_MINUTES`` (60) and ``LINECTL_SESSION_MAX_HOURS`` (12)
end a session; ``LINECTL_ARGON2_TIME_COST`` / ``LINECTL_ARGON2_MEMORY_KIB``
tune new password hashes (argon2-cffi's defaults; tests lower them).
``LINECTL_LDAP_*`` name an optional directory tried after local users;
``LINECTL_TLS_CERT`` / ``LINECTL_TLS_KEY`` serve HTTPS, and a non-loopback
``LINECTL_HTTP_HOST`` without them needs ``LINECTL_ALLOW_PLAIN_HTTP=1``.
"""

from __future__ import annotations

import dataclasses
import ssl
from pathlib import Path

from argon2 import DEFAULT_MEMORY_COST, DEFAULT_TIME_COST

from .parse import PREFIX, ROLES, SettingsError, ints, parse_bool, setting, stripped, verbatim

DEFAULT_LDAP_FILTER = "(uid={username})"


def _ldap_url(name: str, raw: str) -> str:
    url = raw.strip()
    if not url.lower().startswith(("ldap://", "ldaps://")):
        raise SettingsError(f"{PREFIX}{name}: expected ldap://host[:port] or ldaps://host[:port]")
    return url


def _user_filter(name: str, raw: str) -> str:
    text = raw.strip()
    if "{username}" not in text or not (text.startswith("(") and text.endswith(")")):
        raise SettingsError(f"{PREFIX}{name}: a filter in parentheses with {{username}}, "
                            f"e.g. {DEFAULT_LDAP_FILTER}")
    return text


def parse_role_groups(name: str, raw: str) -> tuple[tuple[str, str], ...]:
    """``role=group dn;role=group dn`` (a DN has commas and equal signs of its own)."""
    pairs = []
    for item in filter(None, (part.strip() for part in raw.split(";"))):
        role, sep, dn = item.partition("=")
        if not sep or role.strip() not in ROLES or not dn.strip():
            raise SettingsError(f"{PREFIX}{name}: expected role=group-dn;… with roles {', '.join(ROLES)}")
        pairs.append((role.strip(), dn.strip()))
    return tuple(pairs)


def _pem(name: str, raw: str) -> Path:
    path = Path(raw.strip()).expanduser()
    if not path.is_file():
        raise SettingsError(f"{PREFIX}{name}: no such file {path}")
    return path


@dataclasses.dataclass(frozen=True)
class PeopleSettings:
    session_idle_minutes: int = setting(60, ints(1, 7 * 24 * 60))
    session_max_hours: int = setting(12, ints(1, 24 * 31))
    argon2_time_cost: int = setting(DEFAULT_TIME_COST, ints(1, 64))
    argon2_memory_kib: int = setting(DEFAULT_MEMORY_COST, ints(64, 4 * 1024 * 1024))
    ldap_url: str | None = setting(None, _ldap_url)
    ldap_starttls: bool = setting(False, parse_bool)
    ldap_bind_dn: str | None = setting(None, stripped)
    ldap_bind_password: str | None = setting(None, verbatim)
    ldap_user_base: str | None = setting(None, stripped)
    ldap_user_filter: str = setting(DEFAULT_LDAP_FILTER, _user_filter)
    # role -> group DN, in the order given (the first group the user is in wins)
    ldap_role_groups: tuple[tuple[str, str], ...] = setting((), parse_role_groups)
    ldap_ca_file: Path | None = setting(None, _pem)  # the directory's CA (PEM); unset: the system's CAs
    tls_cert: Path | None = setting(None, _pem)
    tls_key: Path | None = setting(None, _pem)
    allow_plain_http: bool = setting(False, parse_bool)

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None and self.tls_key is not None


LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    return host.strip().lower() in LOOPBACK_HOSTS or host.strip().startswith("127.")


def check_bind(settings: PeopleSettings) -> None:
    """Start-up refuses plain HTTP on a non-loopback address: passwords and
    session cookies would cross the network in clear."""
    host = getattr(settings, "http_host", "127.0.0.1")
    if not settings.tls and not settings.allow_plain_http and not is_loopback(host):
        raise SettingsError(f"{PREFIX}HTTP_HOST: {host} is not a loopback address and no {PREFIX}TLS_CERT/"
                            f"{PREFIX}TLS_KEY are set; set them, or {PREFIX}ALLOW_PLAIN_HTTP=1 behind a "
                            "TLS-terminating proxy")


def check_people(values: dict) -> None:
    """What only the settings together can tell: both TLS files or neither, an
    LDAP URL with its user base and groups."""
    if ("tls_cert" in values) != ("tls_key" in values):
        missing, given = ("TLS_KEY", "TLS_CERT") if "tls_cert" in values else ("TLS_CERT", "TLS_KEY")
        raise SettingsError(f"{PREFIX}{missing}: missing ({PREFIX}{given} is set; both are needed)")
    if "tls_cert" in values:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(values["tls_cert"], values["tls_key"])
        except (ssl.SSLError, OSError) as exc:
            raise SettingsError(f"{PREFIX}TLS_CERT: not a PEM certificate matching {PREFIX}TLS_KEY ({exc})") from None
    if values.get("ldap_url"):
        for key, field in (("LDAP_USER_BASE", "ldap_user_base"), ("LDAP_ROLE_GROUPS", "ldap_role_groups")):
            if not values.get(field):
                raise SettingsError(f"{PREFIX}{key}: needed with {PREFIX}LDAP_URL")
