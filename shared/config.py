"""Every ``LINECTL_*`` setting, read and validated in one place.

The same :class:`Settings` feeds the nameko services (``nameko_config``), the
gateway (``create_app(settings)``), Alembic (``shared.db.migrate``) and the
``linectl`` command. Values come from the environment; a YAML file named by
``LINECTL_CONFIG`` may provide defaults (the environment wins).

A bad value raises :class:`SettingsError` whose message is one line naming the
variable; ``linectl`` prints it and exits with status 2.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import yaml

PREFIX = "LINECTL_"
ROLES = ("operator", "platform", "runtime", "admin")
MAX_RETENTION_DAYS = 36500
LAYOUT_NAME = "line.yaml"


def default_line_file() -> Path:
    """The line layout when ``LINECTL_LINE_FILE`` is unset: ``line.yaml`` in the
    working directory, else the checkout's ``deploy/line.yaml``, else the demo
    layout the wheel ships (``shared/deploy/``, copied from ``deploy/`` at build)."""
    here = Path(__file__).resolve().parent
    for candidate in (Path.cwd() / LAYOUT_NAME, here.parent / "deploy" / LAYOUT_NAME,
                      here / "deploy" / LAYOUT_NAME):
        if candidate.is_file():
            return candidate
    return here / "deploy" / LAYOUT_NAME  # missing: the layout loader names this path


class SettingsError(ValueError):
    """A setting is missing or malformed; ``str(err)`` is one line naming it."""


@dataclasses.dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    amqp_uri: str | None = None
    data_dir: Path = Path("var")
    http_host: str = "127.0.0.1"
    http_port: int = 8000
    plc: str = "sim"
    sim_host: str = "127.0.0.1"
    sim_port: int = 5020
    sim_speed: float = 1.0
    # What the simulator speaks when LINECTL_PLC=sim: "modbus" or "opcua".
    sim_protocol: str = "modbus"
    # OPC UA client (deploy/OPCUA_MAP.md, "Security"): "" picks "none" for the
    # simulator on loopback and "sign-and-encrypt" (Basic256Sha256) for a real PLC.
    opcua_security: str = ""
    opcua_user: str | None = None
    opcua_password: str | None = None
    # The client's certificate and key (PEM); unset -> generated once into <data_dir>/opcua/.
    opcua_cert: Path | None = None
    opcua_key: Path | None = None
    # The server certificate to trust (PEM or DER); unset -> the one the server presents.
    opcua_server_cert: Path | None = None
    tokens: Mapping[str, TokenHolder] = dataclasses.field(default_factory=dict)  # token -> holder
    tokens_generated: bool = False
    # Where the tokens were read from (LINECTL_TOKENS_FILE, else the data directory's
    # generated file): the gateway re-reads it on change and on SIGHUP. None for
    # LINECTL_TOKENS, which changes only with a restart.
    tokens_file: Path | None = None
    ai_lock_seconds: int = 60
    ai_timeout_seconds: int = 120
    ai_retry_backoff_seconds: float = 2.0
    ai_credential_key: str | None = None  # Fernet key; unset -> <data_dir>/ai_credential.key
    command_wait_seconds: float = 2.0
    # A robot/tool step with no result by then suspends its job for the operator.
    step_timeout_seconds: float = 150.0
    # A machine cycle running longer than this many times its cycleSeconds is
    # overdue: an alarm and the operator's question (CYCLE_OVERDUE); never moved by itself.
    cycle_overdue_factor: float = 3.0
    line_file: Path = dataclasses.field(default_factory=default_line_file)
    log_level: str = "INFO"
    log_format: str = "text"
    embedded_pg_port: int = 54329
    # Each process's domain connections take their writer role (shared.db.roles).
    db_roles: bool = True
    # Gateway worker processes; 0 -> one per CPU core. Each serves the AI queue
    # straight from PostgreSQL and streams every event over its own relay.
    gateway_workers: int = 0
    # Request threads per worker: as many as the AI queue's pooled connections
    # (gateway.app.AI_POOL_SIZE). More only wait for a connection while they
    # contend for the GIL: at 200 runtimes 64 threads served fewer cycles/s
    # than 16 (tests/bench/bench_ai_jobs.py). An open websocket takes none, and
    # an idle connection holds one for 0.2 s at most (gateway.edge_worker).
    gateway_threads: int = 16
    # Websocket streams (gateway/stream_hub.py): open streams per gateway process
    # (each costs a socket and its send queue, no thread); the largest client
    # message (the stream reads none: pings only); how long a reader may make no
    # progress before it is told to resume later and closed.
    ws_max_clients: int = 2000
    ws_max_message_bytes: int = 4096
    ws_send_timeout_seconds: float = 10.0
    # Retention (shared/db/retention.py): days kept, and how often the stack's
    # retention job runs (0: never; run `linectl purge` from a timer instead).
    retention_event_days: int = 30
    retention_ai_days: int = 90
    retention_audit_days: int = 365
    retention_dead_letter_days: int = 14
    retention_interval_seconds: int = 3600

    @property
    def gateway_worker_count(self) -> int:
        return self.gateway_workers or max(os.cpu_count() or 1, 1)

    def db_role(self, role: str) -> str | None:
        """The PostgreSQL role a process's domain connections take, or None when off."""
        return role if self.db_roles else None

    # -- derived values -------------------------------------------------

    @property
    def plc_address(self) -> tuple[str, int]:
        """Where the hardware service finds the PLC (the simulator when ``sim``)."""
        if self.plc == "sim":
            return self.sim_host, self.sim_port
        if self.plc.startswith("opc.tcp://"):
            netloc = urlsplit(self.plc).netloc
            host, _, port = netloc.rpartition(":")
            return host.strip("[]"), int(port)
        host, _, port = self.plc.rpartition(":")
        return host, int(port)

    @property
    def plc_protocol(self) -> str:
        """"modbus" or "opcua": what the hardware service speaks to the PLC."""
        if self.plc == "sim":
            return self.sim_protocol
        return "opcua" if self.plc.startswith("opc.tcp://") else "modbus"

    @property
    def plc_url(self) -> str:
        """The device port's address: ``host:port`` (Modbus) or ``opc.tcp://…``."""
        if self.plc != "sim":
            return self.plc
        if self.sim_protocol == "opcua":
            return f"opc.tcp://{self.sim_host}:{self.sim_port}"
        return f"{self.sim_host}:{self.sim_port}"

    @property
    def opcua_security_mode(self) -> str:
        """"none" or "sign-and-encrypt": the configured one, else None only for the simulator."""
        if self.opcua_security:
            return self.opcua_security
        return "none" if self.plc == "sim" else "sign-and-encrypt"

    def resolved_amqp_uri(self, database_url: str | None = None) -> str:
        """The message transport URI: explicit, else ``pgsql://`` on the database."""
        if self.amqp_uri:
            return self.amqp_uri
        db = database_url or self.database_url
        if not db:
            raise SettingsError(
                "LINECTL_AMQP_URI: unset and no database URL to derive pgsql:// from"
            )
        return "pgsql://" + db.split("://", 1)[1]

    def tokens_for(self, role: str) -> list[str]:
        return [tok for tok, holder in self.tokens.items() if holder.role == role]

    def replace(self, **changes) -> Settings:
        return dataclasses.replace(self, **changes)


# -- parsing helpers ---------------------------------------------------------


def _int(name: str, raw: str, lo: int, hi: int) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise SettingsError(f"{PREFIX}{name}: expected an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise SettingsError(f"{PREFIX}{name}: must be between {lo} and {hi}, got {value}")
    return value


def _float(name: str, raw: str, lo: float, hi: float) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise SettingsError(f"{PREFIX}{name}: expected a number, got {raw!r}") from None
    if not (lo < value <= hi) or value != value:
        raise SettingsError(f"{PREFIX}{name}: must be > {lo} and <= {hi}, got {raw}")
    return value


def _db_url(name: str, raw: str) -> str:
    raw = raw.strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("postgresql", "postgres", "postgresql+psycopg2"):
        raise SettingsError(
            f"{PREFIX}{name}: expected postgresql://user@host:port/db, got scheme {parts.scheme!r}"
        )
    if not parts.path.strip("/"):
        raise SettingsError(f"{PREFIX}{name}: the URL names no database")
    return "postgresql://" + raw.split("://", 1)[1]


def _amqp_uri(name: str, raw: str) -> str:
    raw = raw.strip()
    scheme = urlsplit(raw).scheme
    if scheme not in ("pgsql", "amqp", "amqps", "pyamqp", "memory"):
        raise SettingsError(
            f"{PREFIX}{name}: expected pgsql://… or amqp://…, got scheme {scheme!r}"
        )
    return raw


def _plc(name: str, raw: str) -> str:
    raw = raw.strip()
    if raw == "sim":
        return raw
    expected = "expected 'sim', host:port (Modbus TCP) or opc.tcp://host:port[/path] (OPC UA)"
    if "://" in raw:
        parts = urlsplit(raw)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme != "opc.tcp" or not parts.hostname or port is None or parts.query or parts.fragment:
            raise SettingsError(f"{PREFIX}{name}: {expected}, got {raw!r}")
        return raw
    host, sep, port = raw.rpartition(":")
    if not sep or not host:
        raise SettingsError(f"{PREFIX}{name}: {expected}, got {raw!r}")
    _int(name, port, 1, 65535)
    return raw


def _fernet_key(name: str, raw: str) -> str:
    import base64
    import binascii

    raw = raw.strip()
    try:
        ok = len(base64.urlsafe_b64decode(raw.encode())) == 32
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        raise SettingsError(f"{PREFIX}{name}: expected a Fernet key (32 bytes, url-safe base64)")
    return raw


# The example file's values: a deployment that copied it unchanged is refused.
PLACEHOLDER_MARKERS = ("change-me", "changeme", "placeholder", "example", "xxxxxxxx")
MIN_TOKEN_LENGTH = 16


@dataclasses.dataclass(frozen=True)
class TokenHolder:
    """Who a bearer token belongs to: its role, and the name audit rows record."""

    role: str
    name: str


def parse_tokens(name: str, raw: str) -> dict[str, TokenHolder]:
    """``role:token`` or ``role:name:token`` pairs, comma-separated."""
    tokens: dict[str, TokenHolder] = {}
    for item in filter(None, (p.strip() for p in raw.split(","))):
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
        if token in tokens:
            raise SettingsError(f"{PREFIX}{name}: the same token is given twice")
        tokens[token] = TokenHolder(role, holder)
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


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "on", "yes"):
        return True
    if value in ("0", "false", "off", "no"):
        return False
    raise SettingsError(f"{PREFIX}{name}: expected on or off, got {raw!r}")


def _choice(name: str, raw: str, choices: tuple[str, ...]) -> str:
    value = raw.strip()
    if value.upper() in choices:
        return value.upper()
    if value.lower() in choices:
        return value.lower()
    raise SettingsError(f"{PREFIX}{name}: expected one of {', '.join(choices)}, got {raw!r}")


# name -> (field, parser)
_PARSERS = {
    "DATABASE_URL": ("database_url", _db_url),
    "AMQP_URI": ("amqp_uri", _amqp_uri),
    "DATA_DIR": ("data_dir", lambda n, r: Path(r).expanduser()),
    "HTTP_HOST": ("http_host", lambda n, r: r.strip()),
    "HTTP_PORT": ("http_port", lambda n, r: _int(n, r, 1, 65535)),
    "PLC": ("plc", _plc),
    "SIM_HOST": ("sim_host", lambda n, r: r.strip()),
    "SIM_PORT": ("sim_port", lambda n, r: _int(n, r, 1, 65535)),
    "SIM_SPEED": ("sim_speed", lambda n, r: _float(n, r, 0.0, 10000.0)),
    "SIM_PROTOCOL": ("sim_protocol", lambda n, r: _choice(n, r, ("modbus", "opcua"))),
    "OPCUA_SECURITY": ("opcua_security", lambda n, r: _choice(n, r, ("none", "sign-and-encrypt"))),
    "OPCUA_USER": ("opcua_user", lambda n, r: r.strip() or None),
    "OPCUA_PASSWORD": ("opcua_password", lambda n, r: r or None),
    "OPCUA_CERT": ("opcua_cert", lambda n, r: Path(r.strip()).expanduser()),
    "OPCUA_KEY": ("opcua_key", lambda n, r: Path(r.strip()).expanduser()),
    "OPCUA_SERVER_CERT": ("opcua_server_cert", lambda n, r: Path(r.strip()).expanduser()),
    "TOKENS": ("tokens", parse_tokens),
    "TOKENS_FILE": ("tokens_file", lambda n, r: Path(r.strip()).expanduser()),
    "AI_LOCK_SECONDS": ("ai_lock_seconds", lambda n, r: _int(n, r, 1, 86400)),
    "AI_TIMEOUT_SECONDS": ("ai_timeout_seconds", lambda n, r: _int(n, r, 1, 86400)),
    "AI_RETRY_BACKOFF_SECONDS": ("ai_retry_backoff_seconds", lambda n, r: _float(n, r, -1.0, 3600.0)),
    "AI_CREDENTIAL_KEY": ("ai_credential_key", _fernet_key),
    "COMMAND_WAIT_SECONDS": ("command_wait_seconds", lambda n, r: _float(n, r, 0.0, 300.0)),
    "STEP_TIMEOUT_SECONDS": ("step_timeout_seconds", lambda n, r: _float(n, r, 1.0, 86400.0)),
    "CYCLE_OVERDUE_FACTOR": ("cycle_overdue_factor", lambda n, r: _float(n, r, 0.01, 1000.0)),
    "LINE_FILE": ("line_file", lambda n, r: Path(r).expanduser()),
    "LOG_LEVEL": ("log_level", lambda n, r: _choice(n, r, ("DEBUG", "INFO", "WARNING", "ERROR"))),
    "LOG_FORMAT": ("log_format", lambda n, r: _choice(n, r, ("text", "json"))),
    "EMBEDDED_PG_PORT": ("embedded_pg_port", lambda n, r: _int(n, r, 1024, 65535)),
    "DB_ROLES": ("db_roles", _bool),
    "GATEWAY_WORKERS": ("gateway_workers", lambda n, r: _int(n, r, 0, 64)),
    "GATEWAY_THREADS": ("gateway_threads", lambda n, r: _int(n, r, 4, 1024)),
    "WS_MAX_CLIENTS": ("ws_max_clients", lambda n, r: _int(n, r, 0, 100_000)),
    "WS_MAX_MESSAGE_BYTES": ("ws_max_message_bytes", lambda n, r: _int(n, r, 125, 1024 * 1024)),
    "WS_SEND_TIMEOUT_SECONDS": ("ws_send_timeout_seconds", lambda n, r: _float(n, r, 0.5, 600.0)),
    "RETENTION_EVENT_DAYS": ("retention_event_days", lambda n, r: _int(n, r, 1, MAX_RETENTION_DAYS)),
    "RETENTION_AI_DAYS": ("retention_ai_days", lambda n, r: _int(n, r, 1, MAX_RETENTION_DAYS)),
    "RETENTION_AUDIT_DAYS": ("retention_audit_days", lambda n, r: _int(n, r, 1, MAX_RETENTION_DAYS)),
    "RETENTION_DEAD_LETTER_DAYS": ("retention_dead_letter_days", lambda n, r: _int(n, r, 1, MAX_RETENTION_DAYS)),
    "RETENTION_INTERVAL_SECONDS": ("retention_interval_seconds", lambda n, r: _int(n, r, 0, 7 * 86400)),
}


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate every setting. Raises :class:`SettingsError`."""
    env = dict(os.environ if environ is None else environ)
    raw: dict[str, str] = {}

    config_file = env.get(PREFIX + "CONFIG")
    if config_file:
        try:
            data = yaml.safe_load(Path(config_file).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"{PREFIX}CONFIG: cannot read {config_file}: {exc}") from None
        if not isinstance(data, dict):
            raise SettingsError(f"{PREFIX}CONFIG: {config_file} is not a mapping")
        for key, value in data.items():
            key = str(key).upper().removeprefix(PREFIX)
            if key not in _PARSERS:
                raise SettingsError(f"{PREFIX}CONFIG: unknown setting {key!r} in {config_file}")
            raw[key] = "" if value is None else str(value)

    for key in _PARSERS:
        if PREFIX + key in env:
            raw[key] = env[PREFIX + key]

    values = {}
    for key, text in raw.items():
        if text.strip() == "":
            continue  # an empty variable means "unset"
        field, parser = _PARSERS[key]
        values[field] = parser(key, text)

    if values.get("tokens_file") is not None:
        if values.get("tokens"):
            raise SettingsError(f"{PREFIX}TOKENS_FILE: set it or {PREFIX}TOKENS, not both")
        values["tokens"] = read_tokens_file(values["tokens_file"])

    settings = Settings(**values)
    return settings


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
        return settings.replace(tokens=read_tokens_file(path, "TOKENS"), tokens_file=path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pairs = ",".join(f"{role}:{secrets.token_urlsafe(24)}" for role in ROLES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(pairs + "\n")
    return settings.replace(tokens=parse_tokens("TOKENS", pairs), tokens_generated=True, tokens_file=path)


def mask_url(url: str) -> str:
    """A URL fit to print: any password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


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
