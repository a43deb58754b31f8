"""What ``deploy/install.sh`` writes to /etc/linectl (``--config-only``, under a
scratch root): the tokens in a file of their own, readable by the service user
alone, which the env file names as ``LINECTL_TOKENS_FILE`` (so the gateway
re-reads it on a change); a second run keeps both."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shared.config import load_settings

ROOT = Path(__file__).resolve().parents[2]


def _install_config(root: Path) -> str:
    out = subprocess.run(["bash", str(ROOT / "deploy" / "install.sh"), "--config-only", "--python", sys.executable,
                          "--database-url", "postgresql://linectl:pw@db.example:5432/linectl"],
                         env={**os.environ, "LINECTL_INSTALL_ROOT": str(root)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _env_values(env_file: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in env_file.read_text().splitlines()
                if line and not line.startswith("#"))


def test_install_writes_a_private_tokens_file_and_points_the_env_file_at_it(tmp_path):
    _install_config(tmp_path)
    etc = tmp_path / "etc" / "linectl"
    tokens_file, env_file = etc / "tokens", etc / "linectl.env"
    assert oct(tokens_file.stat().st_mode & 0o777) == "0o600"
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"

    values = _env_values(env_file)
    assert values["LINECTL_TOKENS_FILE"] == "/etc/linectl/tokens"
    assert "LINECTL_TOKENS" not in values  # both set would be refused at start
    assert values["LINECTL_DATABASE_URL"] == "postgresql://linectl:pw@db.example:5432/linectl"
    settings = load_settings({**values, "LINECTL_TOKENS_FILE": str(tokens_file)})  # the path under the root
    assert sorted(h.role for h in settings.tokens.values()) == ["admin", "operator", "platform", "runtime"]
    assert settings.tokens_file == tokens_file

    before = tokens_file.read_text(), env_file.read_text()
    assert _install_config(tmp_path).count("kept (it exists)") == 2  # an upgrade keeps both
    assert (tokens_file.read_text(), env_file.read_text()) == before
