"""The one :class:`Settings` (every area's fields together) and how it is read:
the environment, over a YAML file named by ``LINECTL_CONFIG``; and what is
derived from several areas at once (the nameko config, generated tokens).

The area modules never import this one: it composes them."""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

import yaml

from . import ai, database, gateway, line, mqtt, people, plc, retention, tokens, transport
from .parse import PREFIX, ROLES, SettingsError, parsers


@dataclasses.dataclass(frozen=True)
class Settings(database.DatabaseSettings, transport.TransportSettings, line.LineSettings,
               gateway.GatewaySettings, plc.PlcSettings, tokens.TokenSettings, ai.AiSettings,
               retention.RetentionSettings, people.PeopleSettings, mqtt.MqttSettings):
    """Every setting, each area's from its module."""

    def replace(self, **changes) -> Settings:
        return dataclasses.replace(self, **changes)

    @property
    def opcua_cert_directory(self) -> Path:
        """Where generated OPC UA certificates are kept: ``LINECTL_OPCUA_CERT_DIR``,
        else ``<data dir>/opcua`` (``linectl up`` names it to a line's processes,
        whose own data directory is another)."""
        return self.opcua_cert_dir or self.data_dir / "opcua"


# LINECTL_<name> -> (field, parser), in the order they are read: area by area
PARSERS = {name: entry for area in Settings.__bases__ for name, entry in parsers(area).items()}


def config_file_values(config_file: str) -> dict[str, str]:
    """The settings a ``LINECTL_CONFIG`` file gives, by name without the prefix, as text."""
    try:
        data = yaml.safe_load(Path(config_file).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"{PREFIX}CONFIG: cannot read {config_file}: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{PREFIX}CONFIG: {config_file} is not a mapping")
    raw = {}
    for key, value in data.items():
        key = str(key).upper().removeprefix(PREFIX)
        if key not in PARSERS:
            raise SettingsError(f"{PREFIX}CONFIG: unknown setting {key!r} in {config_file}")
        raw[key] = "" if value is None else str(value)
    return raw


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate every setting. Raises :class:`SettingsError`."""
    env = dict(os.environ if environ is None else environ)
    config_file = env.get(PREFIX + "CONFIG")
    raw = config_file_values(config_file) if config_file else {}
    for key in PARSERS:
        if PREFIX + key in env:
            raw[key] = env[PREFIX + key]

    values = {}
    for key, text in raw.items():
        if text.strip() == "":
            continue  # an empty variable means "unset"
        field, parser = PARSERS[key]
        values[field] = parser(key, text)
    tokens.tokens_from_file(values)
    people.check_people(values)
    mqtt.check_mqtt(values)
    return Settings(**values)


def nameko_config(settings: Settings, database_url: str | None = None) -> dict:
    """The nameko config dict for a service process, derived from settings."""
    db = database_url or settings.database_url
    return {
        "AMQP_URI": settings.resolved_amqp_uri(db),
        "serializer": "json",
        "max_workers": 20,
        "parent_calls_tracked": 10,
        "LINECTL_DATABASE_URL": db,
        "LINECTL_DB_ROLES": settings.db_roles,
    }


def ensure_tokens(settings: Settings) -> Settings:
    """Tokens from settings, else from ``<data_dir>/tokens``, else generated there
    (then that file is ``tokens_file``: the gateway re-reads it when it changes).

    Generated tokens are written once (mode 0600) and reported by the caller;
    they are never logged.
    """
    if settings.tokens:
        return settings
    path = Path(settings.data_dir) / "tokens"
    if path.exists():
        return settings.replace(tokens=tokens.read_tokens_file(path, "TOKENS"), tokens_file=path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pairs = ",".join(f"{role}:{secrets.token_urlsafe(24)}" for role in ROLES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(pairs + "\n")
    return settings.replace(tokens=tokens.parse_tokens("TOKENS", pairs), tokens_generated=True, tokens_file=path)
