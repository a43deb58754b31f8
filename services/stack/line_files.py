"""What a line's processes may read besides their line's URL (PRODUCT.md, "Line
credentials"; docs/operations.md, "Line credentials").

The data directory holds the embedded server's superuser password
(``pg.password``), every line's password (``lines/<id>.password``), the tokens,
the first admin's password and the AI credential key. Under ``linectl up`` a
line's processes (simulator, hardware, line_controller) are pointed elsewhere:

- ``LINECTL_DATA_DIR`` is the line's own directory, ``<data dir>/lines/<id>/``
  (mode 0700, made by ``linectl up``), which holds nothing of another line's;
- ``LINECTL_OPCUA_CERT_DIR`` names where the OPC UA certificates were and stay,
  ``<data dir>/opcua/`` (unless set): the hardware's client certificate, which
  a real PLC may already trust, and the simulator's server certificate, one pair
  for a line's hardware and simulator alike. It holds certificates and keys only;
- the central processes' secrets (:data:`WITHHELD`) are not handed on;
- a ``LINECTL_CONFIG`` file, which may hold the owner's URL and the tokens, is
  not named to them: its other settings are handed as variables instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from shared.config import Settings
from shared.config.parse import PREFIX
from shared.config.settings import config_file_values

# The gateway's, the publisher's and the AI jobs' secrets: a line's processes need none.
WITHHELD = ("TOKENS", "TOKENS_FILE", "AI_CREDENTIAL_KEY", "LDAP_BIND_PASSWORD", "TLS_CERT", "TLS_KEY",
            "MQTT_PASSWORD_FILE", "MQTT_CERT_FILE", "MQTT_KEY_FILE")


def line_data_dir(settings: Settings, line_id: str) -> Path:
    """A line's processes' own data directory, beside its password file."""
    return settings.data_dir / "lines" / line_id


def make_line_data_dirs(settings: Settings, line_ids: Iterable[str]) -> None:
    """Each line's own data directory, readable by the owner only (also one made before)."""
    for line_id in line_ids:
        path = line_data_dir(settings, line_id)
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.chmod(0o700)


def line_files_env(settings: Settings, line_id: str, environ: Mapping[str, str] | None = None
                   ) -> dict[str, str | None]:
    """The variables a line's processes get (None: not inherited from ``linectl up``'s)."""
    environ = os.environ if environ is None else environ
    env: dict[str, str | None] = {}
    config_file = environ.get(PREFIX + "CONFIG")
    if config_file:  # the file's settings, under the environment's as load_settings reads them
        env.update({PREFIX + key: value for key, value in config_file_values(config_file).items()
                    if PREFIX + key not in environ})
        env[PREFIX + "CONFIG"] = None
    env.update({PREFIX + key: None for key in WITHHELD})
    env[PREFIX + "DATA_DIR"] = str(line_data_dir(settings, line_id))
    env[PREFIX + "OPCUA_CERT_DIR"] = str(settings.opcua_cert_directory)
    return env
