"""The websocket stream against a real served gateway (``python -m gateway``)
with a real websocket client: replay, resume, no gap and no duplicate across
the backlog→live switch under concurrent writes, gap filling, overflow, auth."""

from __future__ import annotations

import json
import threading

import pytest
import requests
import websocket

from tests.gateway.conftest import OPERATOR, RUNTIME

pytestmark = pytest.mark.timeout(120)


def connect(base: str, after: int | None = None, *, token: str = OPERATOR, query_token=False):
    url = base.replace("http://", "ws://") + "/ws"
    params = []
    if after is not None:
        params.append(f"after={after}")
    if query_token:
        params.append(f"token={token}")
    if params:
        url += "?" + "&".join(params)
    header = [] if query_token else [f"Authorization: Bearer {token}"]
    # The frames are the gateway's JSON; websocket-client's UTF-8 check is pure Python,
    # 10 ms a 16 kB frame here: the test's reader, not the stream, would be the slow part.
    return websocket.create_connection(url, header=header, timeout=30, skip_utf8_validation=True)


def read_until(ws, last_seq: int) -> list[dict]:
    frames = []
    while not frames or frames[-1].get("seq") != last_seq:
        frames.append(json.loads(ws.recv()))
        if frames[-1].get("type") == "overflow":
            break
    return frames


def seqs(frames):
    return [f["seq"] for f in frames]


def test_replay_then_live_in_order(served_gateway, events):
    written = events.write([(f"E{i}", {"i": i}) for i in range(5)], publish=False)
    ws = connect(served_gateway, after=2)
    try:
        backlog = read_until(ws, written[-1]["seq"])
        assert backlog == written[2:]
        metrics = requests.get(served_gateway + "/metrics", timeout=10).text
        assert "linectl_websocket_clients 1.0" in metrics
        live = events.write([("L1", {"x": 1}), ("L2", {"x": 2})])
        assert read_until(ws, live[-1]["seq"]) == live
    finally:
        ws.close()


def test_without_after_the_stream_starts_at_the_newest_event(served_gateway, events):
    events.write([("OLD", {})], publish=False)
    ws = connect(served_gateway, query_token=True)
    try:
        new = events.write([("NEW", {})])
        assert read_until(ws, new[0]["seq"]) == new
    finally:
        ws.close()


def test_gaps_in_the_live_stream_are_filled_from_the_log(served_gateway, events):
    ws = connect(served_gateway, after=0)
    try:
        first = events.write([("A", {})])
        unpublished = events.write([("B", {}), ("C", {})], publish=False)  # a lost message
        last = events.write([("D", {})])
        assert read_until(ws, last[0]["seq"]) == first + unpublished + last
    finally:
        ws.close()


def test_no_gap_no_duplicate_across_the_switch_under_concurrent_writes(served_gateway, events):
    events.write([(f"pre{i}", {"i": i}) for i in range(50)], publish=False)
    total_batches, per_batch = 40, 5
    started = threading.Event()

    def writer():
        for b in range(total_batches):
            # Every 7th batch is written but not published: the stream must still be complete.
            events.write([(f"w{b}.{i}", {"b": b}) for i in range(per_batch)], publish=b % 7 != 3)
            if b == 3:
                started.set()
        events.write([("END", {})])

    t = threading.Thread(target=writer)
    t.start()
    started.wait(30)
    final = 50 + total_batches * per_batch + 1
    clients = [connect(served_gateway, after=a) for a in (0, 10, 49)]
    try:
        t.join(60)
        for after, ws in zip((0, 10, 49), clients, strict=True):
            got = seqs(read_until(ws, final))
            assert got == list(range(after + 1, final + 1))
    finally:
        for ws in clients:
            ws.close()


def test_resume_after_reconnect(served_gateway, events):
    written = events.write([(f"E{i}", {}) for i in range(6)])
    ws = connect(served_gateway, after=0)
    got = read_until(ws, 3)
    ws.close()
    more = events.write([("F", {})])
    ws = connect(served_gateway, after=got[-1]["seq"])
    try:
        assert read_until(ws, more[0]["seq"]) == written[3:] + more
    finally:
        ws.close()


def overflows(base: str) -> float:
    """Streams the gateway has told they fell too far behind, from its /metrics."""
    text = requests.get(base + "/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("linectl_websocket_overflows_total"))


def test_a_client_too_far_behind_is_told_and_closed_and_can_resume(served_gateway, events):
    ws = connect(served_gateway, after=None)
    blob = "x" * 16_000
    try:
        # The client reads nothing while events arrive: its TCP window fills, the
        # server's sends stop, its bounded queue (8 MiB) overflows. It reads as soon
        # as the gateway says it told the client so: from then on a client that reads
        # nothing is cut off after the send timeout, the notice unread.
        told_before, last = overflows(served_gateway), None
        for b in range(40):
            last = events.write([("BIG", {"blob": blob, "b": b, "i": i}) for i in range(100)])
            if overflows(served_gateway) > told_before:
                break
        else:
            pytest.fail("64 MB of events and the client was never told it fell behind")
        final = last[-1]["seq"]
        frames = read_until(ws, final)
        assert frames[-1]["type"] == "overflow" and "seq" not in frames[-1]
        resume = frames[-1]["resumeAfter"]
        assert seqs(frames[:-1]) == list(range(1, resume + 1))
        with pytest.raises(websocket.WebSocketConnectionClosedException):
            while True:
                ws.recv()
    finally:
        ws.close()
    ws = connect(served_gateway, after=resume)
    try:
        assert seqs(read_until(ws, final)) == list(range(resume + 1, final + 1))
    finally:
        ws.close()


def test_websocket_needs_an_operator_token(served_gateway):
    with pytest.raises(websocket.WebSocketBadStatusException) as err:
        connect(served_gateway, token="wrong-token-x")
    assert err.value.status_code == 401
    with pytest.raises(websocket.WebSocketBadStatusException) as err:
        connect(served_gateway, token=RUNTIME, query_token=True)
    assert err.value.status_code == 403
    with pytest.raises(websocket.WebSocketBadStatusException) as err:
        connect(served_gateway, after="x")  # type: ignore[arg-type]
    assert err.value.status_code == 400
