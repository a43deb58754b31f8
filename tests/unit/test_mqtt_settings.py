"""The northbound settings (PRODUCT.md, "Northbound: MQTT and Sparkplug B"):
unset, nothing is published and nothing else changes; a bad value stops
start-up with one line naming it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shared.config import SettingsError, load_settings


def refusal(env: dict) -> str:
    with pytest.raises(SettingsError) as err:
        load_settings(env)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_unset_publishes_nothing_and_defaults_are_the_contracts():
    s = load_settings({})
    assert not s.mqtt_enabled and s.mqtt_format == "sparkplug" and s.sparkplug_group is None
    s = load_settings({"LINECTL_MQTT_URL": "mqtt://broker.plant", "LINECTL_MQTT_FORMAT": "BOTH"})
    assert s.mqtt_endpoint() == ("broker.plant", 1883) and s.mqtt_format == "both"
    assert load_settings({"LINECTL_MQTT_URL": "mqtts://broker:9883"}).mqtt_endpoint() == ("broker", 9883)
    assert s.mqtt_reconnect_max_seconds == 5.0
    assert load_settings({"LINECTL_MQTT_RECONNECT_MAX_SECONDS": "0.2"}).mqtt_reconnect_max_seconds == 0.2


@pytest.mark.parametrize("named, value", [
    ("LINECTL_MQTT_URL", "tcp://broker:1883"),
    ("LINECTL_MQTT_URL", "mqtt://"),
    ("LINECTL_MQTT_URL", "mqtt://broker:99999"),
    ("LINECTL_MQTT_URL", "mqtt://user:secret@broker"),
    ("LINECTL_MQTT_URL", "mqtt://broker/topic"),
    ("LINECTL_MQTT_FORMAT", "xml"),
    ("LINECTL_MQTT_PASSWORD_FILE", "/nonexistent/password"),
    ("LINECTL_SPARKPLUG_GROUP", "plant/a"),
    ("LINECTL_SPARKPLUG_PRIMARY_HOST", "scada#1"),
    ("LINECTL_UNS_PREFIX", "plant/+/x"),
    ("LINECTL_UNS_PREFIX", "spBv1.0"),
    ("LINECTL_MQTT_RECONNECT_MAX_SECONDS", "0"),
])
def test_a_bad_value_is_named(named, value):
    assert refusal({named: value}).startswith(named + ":")


def test_what_only_the_settings_together_tell(tmp_path):
    pem = tmp_path / "not-a-certificate.pem"
    pem.write_text("nothing\n")
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    plain, tls = {"LINECTL_MQTT_URL": "mqtt://broker"}, {"LINECTL_MQTT_URL": "mqtts://broker"}
    assert refusal({**plain, "LINECTL_MQTT_CA_FILE": str(pem)}).startswith("LINECTL_MQTT_CA_FILE: set, but")
    assert refusal({**tls, "LINECTL_MQTT_CERT_FILE": str(pem)}).startswith("LINECTL_MQTT_KEY_FILE: missing")
    assert refusal({**tls, "LINECTL_MQTT_CA_FILE": str(pem)}).startswith("LINECTL_MQTT_CA_FILE: not a PEM")
    assert refusal({**plain, "LINECTL_MQTT_PASSWORD_FILE": str(password)}).startswith("LINECTL_MQTT_USERNAME:")
    s = load_settings({**plain, "LINECTL_MQTT_USERNAME": "linectl", "LINECTL_MQTT_PASSWORD_FILE": str(password)})
    assert s.mqtt_password() == "s3cret"
    # Without a broker the TLS files are not looked at together (nothing is published).
    assert load_settings({"LINECTL_MQTT_CERT_FILE": str(pem)}).mqtt_enabled is False


def test_linectl_stops_with_one_line_naming_the_setting():
    env = {"LINECTL_MQTT_URL": "http://broker", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "services.stack.cli", "migrate"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.strip() == ("linectl: bad setting: LINECTL_MQTT_URL: expected mqtt://host[:port] or "
                                   "mqtts://host[:port], got scheme 'http'"), done.stderr
