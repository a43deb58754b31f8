"""``linectl shell``: nameko's shell with the project's config and the helpers of
``services/stack/shell.py`` (its PYTHONSTARTUP)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import yaml
from nameko.cli.main import main as nameko_main

from services.stack.commands.database import database_url, stop_if_started
from shared.config import Settings, nameko_config

STARTUP = Path(__file__).resolve().parent.parent / "shell.py"


def run(settings: Settings, args) -> int:
    url, server = database_url(settings)
    config = nameko_config(settings, url)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(config, fh)
    os.environ["LINECTL_DATABASE_URL"] = url
    os.environ["PYTHONSTARTUP"] = str(STARTUP)
    sys.argv = ["nameko", "shell", "--config", fh.name]
    try:
        nameko_main()
    finally:
        os.unlink(fh.name)
        stop_if_started(server)
    return 0
