"""``linectl users`` and the first admin: argon2id hashes, never a clear
password, at least 12 characters, every change audited."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from services.identity.bootstrap import PASSWORD_FILE, ensure_initial_admin
from services.stack.cli import main
from shared.db.embedded import EmbeddedPostgres
from tests.gateway.standin import write_plant_file
from tests.identity.conftest import FAST_ARGON2, PASSWORD


@pytest.fixture
def linectl(monkeypatch, db_url, tmp_path):
    for key, value in {"LINECTL_DATABASE_URL": db_url, "LINECTL_DATA_DIR": str(tmp_path), **FAST_ARGON2}.items():
        monkeypatch.setenv(key, value)

    def run(*argv, stdin: str = ""):
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        return main(["users", *argv])

    return run


def _dump(engine) -> str:
    with engine.connect() as conn:
        return "\n".join(str(tuple(r)) for t in ("people_user", "people_audit")
                         for r in conn.execute(text(f"SELECT * FROM {t}")))


def test_users_add_passwd_disable_enable_list(linectl, engine, capsys):
    assert linectl("add", "alice", "--role", "operator", "--lines", "demo-cell", "--display-name", "Alice A",
                   "--password-stdin", stdin=PASSWORD + "\n") == 0
    assert linectl("passwd", "alice", "--password-stdin", stdin="another long password\n") == 0
    assert linectl("disable", "alice") == 0
    capsys.readouterr()
    assert linectl("list") == 0
    listed = capsys.readouterr().out
    assert "alice" in listed and "operator" in listed and "disabled" in listed and "demo-cell" in listed
    assert linectl("enable", "alice") == 0
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT password_hash, disabled, lines FROM people_user")).one()
        actions = conn.execute(text("SELECT action FROM people_audit ORDER BY id")).scalars().all()
    assert stored.password_hash.startswith("$argon2id$") and not stored.disabled and stored.lines == ["demo-cell"]
    assert actions == ["UserAdded", "PasswordChanged", "UserDisabled", "UserEnabled"]
    dump = _dump(engine)
    assert PASSWORD not in dump and "another long password" not in dump


def test_short_password_duplicate_and_unknown_users_are_refused(linectl, engine, capsys):
    assert linectl("add", "bob", "--role", "operator", "--password-stdin", stdin="short-pass\n") == 1
    assert "at least 12 characters" in capsys.readouterr().err
    assert linectl("add", "bob", "--role", "operator", "--password-stdin", stdin=PASSWORD) == 0
    assert linectl("add", "bob", "--role", "admin", "--password-stdin", stdin=PASSWORD) == 1
    assert linectl("disable", "nobody") == 1
    assert linectl("add", "bad name", "--role", "operator", "--password-stdin", stdin=PASSWORD) == 1
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name, role FROM people_user")).all() == [("bob", "operator")]


def test_first_start_creates_admin_once_with_a_private_password_file(engine, people_settings, sign_in):
    password = ensure_initial_admin(engine, people_settings)
    path = people_settings.data_dir / PASSWORD_FILE
    assert password and path.read_text().strip() == password
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert ensure_initial_admin(engine, people_settings) is None
    _secret, session = sign_in.attempt("admin", password, "127.0.0.1")
    assert session.person.role == "admin"


def test_lines_must_be_lines_of_the_plant(linectl, engine, capsys, monkeypatch, tmp_path):
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    monkeypatch.setenv("LINECTL_PLANT_FILE", str(write_plant_file(tmp_path / "plant.yaml", deploy, "works")))
    assert linectl("add", "carol", "--role", "operator", "--lines", "cell-b,cell-x",
                   "--password-stdin", stdin=PASSWORD) == 1
    err = capsys.readouterr().err
    assert "--lines cell-x: no such line" in err and "cell-b" in err
    assert linectl("add", "carol", "--role", "operator", "--lines", "cell-b,cell-c",
                   "--password-stdin", stdin=PASSWORD) == 0
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name, lines FROM people_user")).all() == [("carol", ["cell-b", "cell-c"])]


def test_a_users_command_prints_its_answer_and_logs_nothing_below_warning(tmp_path):
    """On the embedded server, which it starts (and stops) for the command: before,
    ``initialising embedded PostgreSQL …`` and its like came with every answer. In a
    process of its own, as an operator runs it: the suite's own process may hold
    other tests' transports, whose log is not the command's."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("LINECTL_DATABASE_URL", "LINECTL_LOG_LEVEL")}
    env.update({"LINECTL_DATA_DIR": str(tmp_path), **FAST_ARGON2})
    try:
        said = subprocess.run(
            [sys.executable, "-c", "import sys; from services.stack.cli import main; sys.exit(main(sys.argv[1:]))",
             "users", "add", "carol", "--role", "operator", "--password-stdin"],
            input=PASSWORD + "\n", capture_output=True, text=True, env=env, timeout=120,
            cwd=Path(__file__).resolve().parents[2])
    finally:
        EmbeddedPostgres(tmp_path / "pg").remove()
    assert (said.returncode, said.stdout, said.stderr) == (0, "user carol added (operator)\n", "")
