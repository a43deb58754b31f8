import subprocess
import sys
from pathlib import Path

import pytest

from shared.config import SettingsError, load_settings, nameko_config


def refused(env: dict) -> pytest.ExceptionInfo[SettingsError]:
    """Loading `env` raises SettingsError; what was raised."""
    with pytest.raises(SettingsError) as err:
        load_settings(env)
    return err


def test_defaults_match_the_spec():
    s = load_settings({})
    assert s.database_url is None
    assert s.http_port == 8000
    assert s.plc == "sim"
    assert s.ai_lock_seconds == 60
    assert s.ai_timeout_seconds == 120


@pytest.mark.parametrize(
    "name, value",
    [
        ("HTTP_PORT", "eighty"),
        ("HTTP_PORT", "70000"),
        ("SIM_SPEED", "0"),
        ("SIM_SPEED", "fast"),
        ("AI_LOCK_SECONDS", "-1"),
        ("PLC", "nohostport"),
        ("PLC", "plc:notaport"),
        ("PLC", "opc.tcp://plc"),
        ("PLC", "opc.tcp://plc:notaport/x"),
        ("PLC", "http://plc:4840"),
        ("SIM_PROTOCOL", "profinet"),
        ("OPCUA_SECURITY", "basic128rsa15"),
        ("DATABASE_URL", "mysql://root@localhost/db"),
        ("DATABASE_URL", "postgresql://localhost"),
        ("DATABASE_URL", "postgresql://u@db1:5432,db2:port/line"),
        ("DATABASE_URL", "postgresql://u@db1:5432,:5433/line"),
        ("AMQP_URI", "redis://localhost"),
        ("TOKENS", "boss:abcdefghijk"),
        ("TOKENS", "operator"),
        ("TOKENS", "operator:short"),
        ("LOG_FORMAT", "xml"),
        ("COMMAND_WAIT_SECONDS", "soon"),
    ],
)
def test_a_bad_value_is_rejected_naming_the_variable(name, value):
    err = refused({f"LINECTL_{name}": value})
    message = str(err.value)
    assert message.startswith(f"LINECTL_{name}:")
    assert "\n" not in message


def test_good_values_are_parsed():
    s = load_settings(
        {
            "LINECTL_DATABASE_URL": "postgres://u:p@db:5432/line",
            "LINECTL_PLC": "10.0.0.5:502",
            "LINECTL_SIM_SPEED": "50",
            "LINECTL_TOKENS": "operator:op-secret-000000001, admin:ops-lead:admin-secret-00000001",
            "LINECTL_COMMAND_WAIT_SECONDS": "0.5",
        }
    )
    assert s.database_url == "postgresql://u:p@db:5432/line"
    assert s.plc_address == ("10.0.0.5", 502)
    assert s.sim_speed == 50.0
    assert {t: (h.role, h.name) for t, h in s.tokens.items()} == {
        "op-secret-000000001": ("operator", "operator"), "admin-secret-00000001": ("admin", "ops-lead")}
    assert s.command_wait_seconds == 0.5
    # The transport defaults to pgsql:// on the same database.
    assert s.resolved_amqp_uri() == "pgsql://u:p@db:5432/line"


def test_yaml_file_gives_defaults_and_the_environment_wins(tmp_path):
    cfg = tmp_path / "linectl.yaml"
    cfg.write_text("http_port: 9000\nsim_speed: 20\n")
    s = load_settings({"LINECTL_CONFIG": str(cfg), "LINECTL_SIM_SPEED": "5"})
    assert s.http_port == 9000
    assert s.sim_speed == 5.0


def test_yaml_file_with_unknown_or_bad_key_is_rejected(tmp_path):
    cfg = tmp_path / "linectl.yaml"
    cfg.write_text("http_prot: 9000\n")
    with pytest.raises(SettingsError, match="LINECTL_CONFIG: unknown setting"):
        load_settings({"LINECTL_CONFIG": str(cfg)})
    cfg.write_text("http_port: nine\n")
    with pytest.raises(SettingsError, match="^LINECTL_HTTP_PORT:"):
        load_settings({"LINECTL_CONFIG": str(cfg)})


def test_nameko_config_comes_from_the_same_settings():
    s = load_settings({"LINECTL_DATABASE_URL": "postgresql://u@h:1/d"})
    cfg = nameko_config(s)
    assert cfg["AMQP_URI"] == "pgsql://u@h:1/d"
    assert cfg["serializer"] == "json"
    s = load_settings({"LINECTL_DATABASE_URL": "postgresql://u@h:1/d",
                       "LINECTL_AMQP_URI": "amqp://guest:guest@127.0.0.1:5672//"})
    assert nameko_config(s)["AMQP_URI"].startswith("amqp://")


def test_the_cli_stops_with_one_line_naming_the_bad_setting():
    env = {"LINECTL_HTTP_PORT": "abc", "PATH": "/usr/bin:/bin"}
    res = subprocess.run(
        [sys.executable, "-m", "services.stack.cli", "migrate"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert "LINECTL_HTTP_PORT" in lines[0]


def test_the_cli_parser_loads_no_command_code():
    """Every ``linectl`` process builds the whole parser first: a command's own
    imports (``users``: SQLAlchemy, Alembic) are loaded only when it runs."""
    probe = ("import sys; from services.stack.cli import build_parser; "
             "build_parser().parse_args(['users', 'add', 'ann', '--role', 'operator']); "
             "print(sorted(m for m in ('sqlalchemy', 'alembic', 'nameko', 'asyncua', 'pymodbus') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_generated_tokens_are_kept_in_the_data_dir(tmp_path):
    from shared.config import ensure_tokens

    s = load_settings({"LINECTL_DATA_DIR": str(tmp_path)})
    first = ensure_tokens(s)
    assert first.tokens_generated
    assert sorted(h.role for h in first.tokens.values()) == ["admin", "operator", "platform", "runtime"]
    assert (tmp_path / "tokens").stat().st_mode & 0o777 == 0o600
    second = ensure_tokens(s)
    assert second.tokens == first.tokens
    assert not second.tokens_generated


@pytest.mark.parametrize("raw, why", [
    ("operator:short-token-15c", "shorter than 16"),
    ("operator:CHANGE-ME-operator", "placeholder"),
    ("admin:admin:CHANGE-ME-admin-xxxx", "placeholder"),
    ("operator:bad name:abcdefghijklmnopq", "letters, digits"),
    ("operator:a:b:abcdefghijklmnopq", "role:name:token"),
    ("operator:abcdefghijklmnopq,admin:abcdefghijklmnopq", "twice"),
])
def test_weak_or_placeholder_tokens_are_refused(raw, why):
    err = refused({"LINECTL_TOKENS": raw})
    assert why in str(err.value) and str(err.value).startswith("LINECTL_TOKENS:")


def test_the_example_env_file_is_refused_as_it_ships():
    """Its tokens are a file install.sh writes; its LINECTL_TOKENS alternative holds no real token."""
    example = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "linectl.env.example"
    lines = example.read_text().splitlines()
    tokens_file = next(x for x in lines if x.startswith("LINECTL_TOKENS_FILE=")).split("=", 1)[1]
    assert not Path(tokens_file).exists()
    with pytest.raises(SettingsError, match=f"LINECTL_TOKENS_FILE: cannot read {tokens_file}"):
        load_settings({"LINECTL_TOKENS_FILE": tokens_file})
    alternative = next(x for x in lines if x.startswith("# LINECTL_TOKENS="))
    with pytest.raises(SettingsError, match="shorter than"):
        load_settings({"LINECTL_TOKENS": alternative.split("=", 1)[1]})


def test_a_tokens_file_is_read_with_comments_and_one_pair_a_line(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("# rotated 2024-05-01\noperator:alice:op-secret-000000001\n\n"
                    "admin:admin-secret-00000001,runtime:rt-secret-000000001\n")
    s = load_settings({"LINECTL_TOKENS_FILE": str(path)})
    assert s.tokens_file == path
    assert {t: (h.role, h.name) for t, h in s.tokens.items()} == {
        "op-secret-000000001": ("operator", "alice"),
        "admin-secret-00000001": ("admin", "admin"),
        "rt-secret-000000001": ("runtime", "runtime"),
    }


@pytest.mark.parametrize("content, why", [
    (None, "cannot read"),
    ("", "no role:token pair"),
    ("# only a comment\n", "no role:token pair"),
    ("operator:short\n", "shorter than 16"),
    ("boss:abcdefghijklmnopq\n", "unknown role"),
])
def test_a_bad_tokens_file_is_refused_at_start_naming_the_variable_and_the_file(tmp_path, content, why):
    path = tmp_path / "tokens"
    if content is not None:
        path.write_text(content)
    err = refused({"LINECTL_TOKENS_FILE": str(path)})
    assert str(err.value).startswith("LINECTL_TOKENS_FILE") and str(path) in str(err.value)
    assert why in str(err.value)
    assert "short\n" not in str(err.value)


def test_tokens_and_a_tokens_file_are_not_both_set(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("operator:op-secret-000000001\n")
    err = refused({"LINECTL_TOKENS_FILE": str(path), "LINECTL_TOKENS": "admin:admin-secret-00000001"})
    assert "not both" in str(err.value)


def test_the_data_dirs_tokens_file_is_the_one_to_watch(tmp_path):
    from shared.config import ensure_tokens

    generated = ensure_tokens(load_settings({"LINECTL_DATA_DIR": str(tmp_path)}))
    assert generated.tokens_file == tmp_path / "tokens"
    assert ensure_tokens(load_settings({"LINECTL_DATA_DIR": str(tmp_path)})).tokens_file == tmp_path / "tokens"
    fixed = ensure_tokens(load_settings({"LINECTL_DATA_DIR": str(tmp_path),
                                         "LINECTL_TOKENS": "admin:admin-secret-00000001"}))
    assert fixed.tokens_file is None  # LINECTL_TOKENS changes with a restart only


def test_the_plc_is_modbus_or_opc_ua_and_the_simulator_speaks_either():
    s = load_settings({"LINECTL_PLC": "opc.tcp://10.0.0.7:4840/plc"})
    assert (s.plc_protocol, s.plc_url, s.plc_address) == ("opcua", "opc.tcp://10.0.0.7:4840/plc", ("10.0.0.7", 4840))
    assert s.opcua_security_mode == "sign-and-encrypt"  # a real PLC: secured unless configured
    s = load_settings({"LINECTL_SIM_PROTOCOL": "opcua", "LINECTL_SIM_PORT": "4841"})
    assert (s.plc_protocol, s.plc_url, s.opcua_security_mode) == ("opcua", "opc.tcp://127.0.0.1:4841", "none")
    s = load_settings({"LINECTL_PLC": "10.0.0.5:502"})
    assert (s.plc_protocol, s.plc_url) == ("modbus", "10.0.0.5:502")
    s = load_settings({"LINECTL_PLC": "opc.tcp://plc:4840", "LINECTL_OPCUA_SECURITY": "none"})
    assert s.opcua_security_mode == "none"  # allowed where configured


def test_a_database_url_may_name_a_primary_and_its_standbys():
    """libpq's multi-host form (PRODUCT.md, "Database failover"): kept as given for
    libpq (the pgsql:// transport), rewritten for SQLAlchemy, masked whole."""
    from shared.config.database import mask_url
    from shared.db.engine import sqlalchemy_url

    url = "postgresql://line:s3cret@db1:5432,db2:5433/linectl?target_session_attrs=read-write"
    assert load_settings({"LINECTL_DATABASE_URL": url}).database_url == url
    assert sqlalchemy_url(url) == ("postgresql+psycopg2://line:s3cret@/linectl?host=db1:5432&host=db2:5433"
                                   "&target_session_attrs=read-write")
    assert mask_url(url) == "postgresql://line:***@db1:5432,db2:5433/linectl?target_session_attrs=read-write"
