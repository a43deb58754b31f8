"""TLS (issue 39): ``LINECTL_TLS_CERT`` / ``LINECTL_TLS_KEY`` serve HTTPS and
wss on the gateway's port, with HSTS and a Secure session cookie, and the
real client address in audit rows; plain HTTP on a non-loopback address
stops start-up with one line naming the setting."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gateway.__main__ import main as gateway_main
from shared.config import SettingsError, check_bind, load_settings
from tests.gateway.conftest import ADMIN
from tests.gateway.test_people import PASSWORD, people  # noqa: F401 - the fixture
from tests.identity.certs import self_signed
from tests.identity.conftest import FAST_ARGON2
from tests.support.waiting import wait_for

# The suite's process runs under eventlet, whose green ssl recurses in urllib3's
# TLS set-up: the HTTPS client runs in a plain interpreter of its own.
CLIENT = r"""
import http.client, json, ssl, sys, requests, websocket
base, port, cert, password, admin = sys.argv[1:]
# From 127.0.0.2: the audit row must name this address, not the TLS front's 127.0.0.1.
conn = http.client.HTTPSConnection("127.0.0.1", int(port), source_address=("127.0.0.2", 0), timeout=10,
                                   context=ssl.create_default_context(cafile=cert))
conn.request("POST", "/api/session", json.dumps({"username": "alice", "password": password}),
             {"Content-Type": "application/json"})
signed = conn.getresponse()
signed.status_code = signed.status
cookie = signed.headers["Set-Cookie"].split(";")[0]
ws = websocket.create_connection(f"wss://127.0.0.1:{port}/ws", header=["Cookie: " + cookie],
                                 sslopt={"ca_certs": cert}, timeout=10)
ws.close()
audit = requests.get(base + "/api/audit?action=SignIn", headers={"Authorization": "Bearer " + admin},
                     verify=cert, timeout=10).json()["items"]
try:
    requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    plain = "answered"
except requests.ConnectionError:
    plain = "refused"
print(json.dumps({"status": signed.status_code, "hsts": signed.headers.get("Strict-Transport-Security"),
                  "cookie": signed.headers.get("Set-Cookie"), "audit": audit[0], "plain": plain}))
"""


def _serving(url: str, cert: str) -> bool:
    probe = "import sys, requests; requests.get(sys.argv[1], verify=sys.argv[2], timeout=1).raise_for_status()"
    return subprocess.run([sys.executable, "-c", probe, url, cert], capture_output=True).returncode == 0


def test_https_and_wss_with_hsts_a_secure_cookie_and_the_client_address(gateway_server, people, tmp_path):  # noqa: F811
    cert, key = self_signed(tmp_path)
    served = gateway_server(wait=False, LINECTL_TLS_CERT=cert, LINECTL_TLS_KEY=key, **FAST_ARGON2)
    base = f"https://127.0.0.1:{served.port}"
    wait_for(lambda: _serving(base + "/healthz", cert), timeout=30, interval=0.2,
             message="the gateway to serve HTTPS")
    run = subprocess.run([sys.executable, "-c", CLIENT, base, str(served.port), cert, PASSWORD, ADMIN],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen["status"] == 200 and seen["hsts"].startswith("max-age=") and "Secure" in seen["cookie"]
    assert seen["audit"]["actor"] == "alice" and seen["audit"]["source"] == "127.0.0.2"  # the PROXY line's
    assert seen["plain"] == "refused"  # no plain HTTP on the port


def test_a_non_loopback_bind_without_tls_stops_start_up_naming_the_setting(gateway_env, monkeypatch, capsys):
    env = {**gateway_env, "LINECTL_HTTP_HOST": "0.0.0.0"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert gateway_main([]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "LINECTL_HTTP_HOST" in lines[0] and "LINECTL_ALLOW_PLAIN_HTTP" in lines[0]
    check_bind(load_settings({**env, "LINECTL_ALLOW_PLAIN_HTTP": "1"}))  # allowed when asked for
    check_bind(load_settings({**env, "LINECTL_HTTP_HOST": "127.0.0.1"}))
    # The one of the pair that is missing, said plainly.
    with pytest.raises(SettingsError) as no_key:
        load_settings({"LINECTL_TLS_CERT": __file__})
    assert str(no_key.value) == "LINECTL_TLS_KEY: missing (LINECTL_TLS_CERT is set; both are needed)"
    with pytest.raises(SettingsError) as no_cert:
        load_settings({"LINECTL_TLS_KEY": __file__})
    assert str(no_cert.value) == "LINECTL_TLS_CERT: missing (LINECTL_TLS_KEY is set; both are needed)"
