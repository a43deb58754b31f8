"""Readiness that answers at once: the stand-in services in their own process,
``kill -9``'d; ``/readyz`` names the line_controller and commands answer 503
within about a second, on both transports (the RPC queue outlives the
service, so waiting on an RPC would take its whole timeout)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.gateway.conftest import AUTH, ServedGateway
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)

STANDINS = """
import eventlet
eventlet.monkey_patch()
import json, sys
from nameko.containers import ServiceContainer
from tests.gateway.standin import StandInHardware, StandInLineController
config = json.loads(sys.argv[1])
for cls in (StandInLineController, StandInHardware):
    ServiceContainer(cls, config).start()
print("started", flush=True)
eventlet.sleep(3600)
"""


@pytest.fixture(params=["pgsql", "rabbitmq"])
def transport_uri(request, amqp_uri):
    return amqp_uri if request.param == "pgsql" else request.getfixturevalue("rabbit_uri")


def test_a_killed_line_controller_is_not_ready_and_refuses_commands_at_once(
        transport_uri, nameko_config, gateway_env, writable, tmp_path):
    config = {**nameko_config, "AMQP_URI": transport_uri}
    services = subprocess.Popen([sys.executable, "-c", STANDINS, json.dumps(config)], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True)
    served = None
    try:
        assert services.stdout.readline().strip() == "started"
        served = ServedGateway({**gateway_env, "LINECTL_AMQP_URI": transport_uri}, tmp_path)
        readyz = served.base + "/readyz"
        wait_for(lambda: requests.get(readyz, timeout=10).status_code == 200, 30, message="ready")

        services.kill()
        services.wait()
        killed = time.monotonic()
        # (a 503 Response is falsy: wait on its body)
        body = wait_for(lambda: (r := requests.get(readyz, timeout=10)).status_code == 503 and r.json(), 10)
        not_ready_after = time.monotonic() - killed
        assert "line_controller" in body["error"]["message"]
        assert not_ready_after < 1.5, not_ready_after

        started = time.monotonic()
        r = requests.post(served.base + "/api/work-orders", json={"productId": "BRACKET-A", "quantity": 1},
                          headers=AUTH, timeout=20)
        assert r.status_code == 503 and r.json()["error"]["code"] == "UNAVAILABLE"
        assert time.monotonic() - started < 1.5
    finally:
        services.kill()
        services.wait()
        if served is not None:
            served.stop()
