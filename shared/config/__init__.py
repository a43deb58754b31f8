"""Every ``LINECTL_*`` setting, read and validated in one place.

The same :class:`Settings` feeds the nameko services (``nameko_config``), the
gateway (``create_app(settings)``), Alembic (``shared.db.migrate``) and the
``linectl`` command. Values come from the environment; a YAML file named by
``LINECTL_CONFIG`` may provide defaults (the environment wins).

A bad value raises :class:`SettingsError` whose message is one line naming the
variable; ``linectl`` prints it and exits with status 2.

One module per area, each with its fields, what is derived from them and their
parsers: ``database``, ``transport`` (and the nameko config), ``line`` (data
directory, layout, logging, the loop's timings), ``gateway``, ``plc`` (the PLC,
its protocol, the simulator), ``tokens``, ``ai``, ``retention``, ``people`` (sessions,
LDAP, TLS), ``mqtt`` (the northbound broker); ``settings``
joins them, reads them and derives what needs several of them (the nameko
config, generated tokens); ``parse`` holds the shared parsers. The area
modules import only ``parse``: never ``settings`` nor each other.
"""

from .ai import AiSettings
from .database import DatabaseSettings, mask_url
from .gateway import GatewaySettings
from .line import LAYOUT_NAME, LineSettings, default_line_file
from .mqtt import MqttSettings
from .parse import PREFIX, SettingsError
from .people import PeopleSettings, check_bind
from .plc import PlcSettings
from .retention import MAX_RETENTION_DAYS, RetentionSettings
from .settings import Settings, ensure_tokens, load_settings, nameko_config
from .tokens import (
    MIN_TOKEN_LENGTH,
    PLACEHOLDER_MARKERS,
    ROLES,
    TokenHolder,
    TokenSettings,
    parse_tokens,
    parse_tokens_file,
    read_tokens_file,
)
from .transport import TransportSettings

__all__ = [
    "AiSettings", "DatabaseSettings", "GatewaySettings", "LAYOUT_NAME", "LineSettings", "MAX_RETENTION_DAYS",
    "MIN_TOKEN_LENGTH", "MqttSettings", "PLACEHOLDER_MARKERS", "PeopleSettings", "PREFIX", "PlcSettings", "ROLES",
    "RetentionSettings",
    "Settings", "SettingsError", "TokenHolder", "check_bind", "TokenSettings", "TransportSettings", "default_line_file",
    "ensure_tokens", "load_settings", "mask_url", "nameko_config", "parse_tokens", "parse_tokens_file",
    "read_tokens_file",
]
