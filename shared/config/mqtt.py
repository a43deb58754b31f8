"""Northbound settings (PRODUCT.md, "Northbound: MQTT and Sparkplug B"): the
broker the plant's data is published to (``services.uns``), its credentials
and TLS files, and the formats and names of what is published.

``LINECTL_MQTT_URL`` unset: nothing is published and none of the others is
looked at beyond its own syntax. The password is read from a file (never
from the URL or the environment), as the other secrets are."""

from __future__ import annotations

import dataclasses
import re
import ssl
from pathlib import Path
from urllib.parse import urlsplit

from .parse import PREFIX, SettingsError, choice, floats, setting

FORMATS = ("sparkplug", "json", "both")
DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}
# A Sparkplug group, edge node or host id is one MQTT topic level: none of the
# wildcards nor the separator (Sparkplug 3.0.0, "Topic Namespace Elements").
_SPARKPLUG_ID = re.compile(r"^[^/+#\s]{1,64}$")
_PREFIX_LEVEL = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _mqtt_url(name: str, raw: str) -> str:
    raw = raw.strip()
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise SettingsError(f"{PREFIX}{name}: not a URL ({exc}): {raw!r}") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise SettingsError(f"{PREFIX}{name}: expected mqtt://host[:port] or mqtts://host[:port], "
                            f"got scheme {parts.scheme!r}")
    if not parts.hostname:
        raise SettingsError(f"{PREFIX}{name}: no host in {raw!r}")
    if parts.username is not None or parts.password is not None:
        raise SettingsError(f"{PREFIX}{name}: no credentials in the URL; set {PREFIX}MQTT_USERNAME and "
                            f"{PREFIX}MQTT_PASSWORD_FILE")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise SettingsError(f"{PREFIX}{name}: expected nothing after host:port, got {raw!r}")
    if port == 0:
        raise SettingsError(f"{PREFIX}{name}: port 0 in {raw!r}")
    return raw


def _file(name: str, raw: str) -> Path:
    path = Path(raw.strip()).expanduser()
    if not path.is_file():
        raise SettingsError(f"{PREFIX}{name}: no such file {path}")
    try:
        path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"{PREFIX}{name}: cannot read {path}: {exc.strerror}") from None
    return path


def _text(name: str, raw: str) -> str:
    value = raw.strip()
    if len(value) > 200 or any(ord(c) < 32 for c in value):
        raise SettingsError(f"{PREFIX}{name}: at most 200 printable characters")
    return value


def _sparkplug_id(name: str, raw: str) -> str:
    value = raw.strip()
    if not _SPARKPLUG_ID.match(value):
        raise SettingsError(f"{PREFIX}{name}: one topic level of at most 64 characters, without /, + or #; "
                            f"got {raw!r}")
    return value


def _uns_prefix(name: str, raw: str) -> str:
    value = raw.strip()
    levels = value.split("/")
    if not all(_PREFIX_LEVEL.match(level) for level in levels) or len(levels) > 8:
        raise SettingsError(f"{PREFIX}{name}: topic levels of letters, digits, _ . - joined by /; got {raw!r}")
    if levels[0] == "spBv1.0":
        raise SettingsError(f"{PREFIX}{name}: spBv1.0 is Sparkplug's namespace")
    return value


@dataclasses.dataclass(frozen=True)
class MqttSettings:
    mqtt_url: str | None = setting(None, _mqtt_url)
    mqtt_username: str | None = setting(None, _text)
    mqtt_password_file: Path | None = setting(None, _file)
    mqtt_ca_file: Path | None = setting(None, _file)
    mqtt_cert_file: Path | None = setting(None, _file)
    mqtt_key_file: Path | None = setting(None, _file)
    mqtt_format: str = setting("sparkplug", choice(FORMATS))
    sparkplug_group: str | None = setting(None, _sparkplug_id)  # None: the plant's id
    sparkplug_primary_host: str | None = setting(None, _sparkplug_id)
    uns_prefix: str = setting("linectl", _uns_prefix)
    # The longest wait between two tries while the broker is away.
    mqtt_reconnect_max_seconds: float = setting(5.0, floats(0.0, 300.0))

    @property
    def mqtt_enabled(self) -> bool:
        return self.mqtt_url is not None

    @property
    def mqtt_tls(self) -> bool:
        return (self.mqtt_url or "").startswith("mqtts:")

    def mqtt_endpoint(self) -> tuple[str, int]:
        """The broker's host and port."""
        parts = urlsplit(self.mqtt_url or "")
        return parts.hostname or "", parts.port or DEFAULT_PORTS[parts.scheme]

    def mqtt_password(self) -> str | None:
        """The password file's first line (read when connecting, so a rotated file is taken)."""
        if self.mqtt_password_file is None:
            return None
        return self.mqtt_password_file.read_text().splitlines()[0] if self.mqtt_password_file.stat().st_size else ""

    def mqtt_ssl_context(self) -> ssl.SSLContext | None:
        """The client's TLS context for ``mqtts://`` (the CA file, else the system's)."""
        if not self.mqtt_tls:
            return None
        context = ssl.create_default_context(cafile=str(self.mqtt_ca_file) if self.mqtt_ca_file else None)
        if self.mqtt_cert_file is not None:
            context.load_cert_chain(str(self.mqtt_cert_file), str(self.mqtt_key_file))
        return context

    def publishes_sparkplug(self) -> bool:
        return self.mqtt_format in ("sparkplug", "both")

    def publishes_json(self) -> bool:
        return self.mqtt_format in ("json", "both")


def check_mqtt(values: dict) -> None:
    """What only the settings together can tell, once a broker is named: TLS files
    only with ``mqtts://``, a certificate with its key, files that TLS can load."""
    url = values.get("mqtt_url")
    if url is None:
        return
    tls = url.startswith("mqtts:")
    if ("mqtt_cert_file" in values) != ("mqtt_key_file" in values):
        missing, given = (("MQTT_KEY_FILE", "MQTT_CERT_FILE") if "mqtt_cert_file" in values
                          else ("MQTT_CERT_FILE", "MQTT_KEY_FILE"))
        raise SettingsError(f"{PREFIX}{missing}: missing ({PREFIX}{given} is set; both are needed)")
    for key, field in (("MQTT_CA_FILE", "mqtt_ca_file"), ("MQTT_CERT_FILE", "mqtt_cert_file")):
        if field in values and not tls:
            raise SettingsError(f"{PREFIX}{key}: set, but {PREFIX}MQTT_URL is mqtt:// (no TLS); use mqtts://")
    if "mqtt_password_file" in values and "mqtt_username" not in values:
        raise SettingsError(f"{PREFIX}MQTT_USERNAME: needed with {PREFIX}MQTT_PASSWORD_FILE")
    if not tls:
        return
    try:
        context = ssl.create_default_context(cafile=str(values["mqtt_ca_file"]) if "mqtt_ca_file" in values else None)
    except (ssl.SSLError, OSError) as exc:
        raise SettingsError(f"{PREFIX}MQTT_CA_FILE: not a PEM CA certificate ({exc})") from None
    if "mqtt_cert_file" in values:
        try:
            context.load_cert_chain(str(values["mqtt_cert_file"]), str(values["mqtt_key_file"]))
        except (ssl.SSLError, OSError) as exc:
            raise SettingsError(f"{PREFIX}MQTT_CERT_FILE: not a PEM certificate matching {PREFIX}MQTT_KEY_FILE "
                                f"({exc})") from None
