"""Several gateways behind one line_controller: every gateway streams every
event of the loop, whichever gateway the command came through."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import requests
import websocket
from sqlalchemy import text

from services.line_controller.service import LineControllerService
from tests.support.ports import free_port
from tests.support.processes import kill_group
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(180)
TOKEN = "op-token-two-gateways"


@pytest.fixture
def gateways(db_url, nameko_config, tmp_path):
    """Two ``python -m gateway`` processes on free ports; yields their base URLs."""
    procs, bases = [], []
    try:
        for n in (1, 2):
            port = free_port()
            env = {**os.environ, "LINECTL_DATABASE_URL": db_url, "LINECTL_AMQP_URI": nameko_config["AMQP_URI"],
                   "LINECTL_TOKENS": f"operator:{TOKEN}", "LINECTL_HTTP_PORT": str(port),
                   "LINECTL_DATA_DIR": str(tmp_path / f"gw{n}"), "LINECTL_LOG_LEVEL": "WARNING",
                   "LINECTL_COMMAND_WAIT_SECONDS": "10"}
            log = open(tmp_path / f"gateway{n}.log", "wb")
            procs.append((subprocess.Popen([sys.executable, "-m", "gateway", "--name", f"gateway{n}"],
                                           env=env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True), log))
            bases.append(f"http://127.0.0.1:{port}")
        for (proc, _), base in zip(procs, bases, strict=True):
            wait_for(lambda p=proc, b=base: _serves(p, b), 60, 0.1, f"{base}/healthz")
        yield bases
    finally:
        for proc, log in procs:
            kill_group(proc)
            log.close()


def _serves(proc, base):
    assert proc.poll() is None, "a gateway exited"
    try:
        return requests.get(base + "/healthz", timeout=1).ok
    except requests.RequestException:
        return False


def _stream(base):
    return websocket.create_connection(base.replace("http://", "ws://") + "/ws",
                                       header=[f"Authorization: Bearer {TOKEN}"], timeout=30)


def _read_until(ws, last_seq):
    frames = []
    while not frames or frames[-1].get("seq", 0) < last_seq:
        frame = json.loads(ws.recv())
        if "seq" in frame:
            frames.append(frame)
    return frames


def test_two_gateways_both_stream_every_event(container_factory, nameko_config, engine, gateways):
    container = container_factory(LineControllerService, nameko_config)
    container.start()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    streams = [_stream(base) for base in gateways]
    try:
        # Commands through both gateways, one after the other.
        for n, base in enumerate(gateways):
            r = requests.post(base + "/api/work-orders", json={"productId": "SHAFT-B", "quantity": 2 + n},
                              headers=auth, timeout=30)
            assert r.status_code == 201, r.text
            r = requests.post(f"{base}/api/work-orders/{r.json()['id']}/start", headers=auth, timeout=30)
            assert r.status_code == 200, r.text
        with engine.connect() as conn:
            logged = [dict(seq=row.seq, type=row.type) for row in conn.execute(text(
                "SELECT seq, type FROM event_log WHERE seq > (SELECT min(seq) - 1 FROM event_log "
                "WHERE type = 'WorkOrderCreated') ORDER BY seq"))]
        received = [_read_until(ws, logged[-1]["seq"]) for ws in streams]
    finally:
        for ws in streams:
            ws.close()
    ours = [[f for f in frames if f["seq"] >= logged[0]["seq"]] for frames in received]
    for frames in ours:
        assert [dict(seq=f["seq"], type=f["type"]) for f in frames] == logged  # all, in order, once
    assert ours[0] == ours[1]  # the same frames, payloads included
