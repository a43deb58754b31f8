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

from gateway.app import create_app
from gateway.context import gateway_context
from gateway.service_watch import PRESENCE_TTL, STATUS_TTL, ServiceWatch
from shared.config import load_settings
from shared.events import HARDWARE
from tests.gateway.conftest import AUTH, ServedGateway
from tests.gateway.standin import StandInHardware, StandInLineController
from tests.support.db import database_down
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


def test_after_a_database_error_readyz_asks_afresh_instead_of_answering_from_its_cache(
        container_factory, nameko_config, gateway_env, writable, db_url):
    container_factory(StandInLineController, nameko_config).start()
    hardware = container_factory(StandInHardware, nameko_config)
    hardware.start()
    app = create_app(load_settings(gateway_env))
    try:
        client = app.test_client()
        watch = gateway_context(app).service_watch()
        # A cache that would hold for a minute: only the error can make it ask again.
        watch.presence_ttl = watch.status_ttl = 60
        assert client.get("/readyz").status_code == 200
        hardware.stop()
        assert client.get("/readyz").status_code == 200  # the cache has not looked since

        with database_down(db_url):
            r = client.get("/readyz")
            assert r.status_code == 503 and "database (unreachable)" in r.get_json()["error"]["message"]
        # The database is back; "ready" would be the cache's answer from before the outage.
        r = client.get("/readyz")
        assert r.status_code == 503, r.get_json()
        # What it asked during the outage ("transport unreachable") is kept for its
        # TTL; with the usual ones it soon names what is really missing.
        watch.presence_ttl, watch.status_ttl = PRESENCE_TTL, STATUS_TTL
        wait_for(lambda: "hardware (not running)" in client.get("/readyz").get_json()["error"]["message"], 10,
                 message="readyz to name the stopped hardware service")
    finally:
        gateway_context(app).close()


def test_after_a_transport_error_a_cached_status_is_asked_again(container_factory, nameko_config, writable, db_url):
    container_factory(StandInHardware, nameko_config).start()
    asked = []

    def status_of(service):
        asked.append(service)
        return {"answer": len(asked)}

    # Presence asked every time, status() cached for a minute.
    watch = ServiceWatch(nameko_config["AMQP_URI"], status_of, presence_ttl=0, status_ttl=60)
    try:
        assert watch.status(HARDWARE) == ({"answer": 1}, None)
        assert watch.status(HARDWARE) == ({"answer": 1}, None)  # from the cache
        with database_down(db_url):  # the pgsql:// transport's database
            assert watch.status(HARDWARE) == (None, "hardware (message transport unreachable)")
        # Once the service consumes again, its status is asked afresh, not taken from before the error.
        status = wait_for(lambda: watch.status(HARDWARE)[0], 20, message="the hardware service back")
        assert status == {"answer": 2}
    finally:
        watch.close()
