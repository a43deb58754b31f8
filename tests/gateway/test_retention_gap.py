"""Retention purged the start of the event log: a client resuming from before
it is told which seqs are gone (``gap``) instead of silently skipping them."""

from __future__ import annotations

import json

import pytest
import requests
from sqlalchemy import text

from shared.db.engine import make_engine
from shared.db.retention import RetentionPolicy, purge
from tests.gateway.conftest import AUTH
from tests.gateway.test_ws import connect, read_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def purged(db_url, events):
    """Six events, the first three older than the retention period and purged."""
    written = events.write([(f"E{i}", {"i": i}) for i in range(6)], publish=False)
    engine = make_engine(db_url, pool_size=1)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE event_log SET at = now() - interval '40 days' WHERE seq <= :s"),
                         {"s": written[2]["seq"]})
        assert purge(engine, RetentionPolicy(event_days=30))["event_log"] == 3
    finally:
        engine.dispose()
    return written


def test_rest_names_the_purged_gap(client, purged):
    first_kept = purged[3]["seq"]
    body = client.get("/api/events?after=0", headers=AUTH).get_json()
    assert body["gap"] == {"from": 1, "to": first_kept - 1}
    assert [i["seq"] for i in body["items"]] == [f["seq"] for f in purged[3:]]
    # From a seq still kept: no gap.
    assert "gap" not in client.get(f"/api/events?after={first_kept}", headers=AUTH).get_json()
    assert "gap" not in client.get(f"/api/events?after={first_kept - 1}", headers=AUTH).get_json()


def test_the_stream_sends_a_gap_frame_before_what_still_exists(served_gateway, purged):
    first_kept = purged[3]["seq"]
    ws = connect(served_gateway, after=1)
    try:
        frames = read_until(ws, purged[-1]["seq"])
    finally:
        ws.close()
    assert frames[0] == {"type": "gap", "from": 2, "to": first_kept - 1}
    assert frames[1:] == purged[3:]
    # Resuming from the newest purged seq has nothing missing: no gap frame.
    ws = connect(served_gateway, after=first_kept - 1)
    try:
        assert json.loads(ws.recv()) == purged[3]
    finally:
        ws.close()
    assert requests.get(served_gateway + "/healthz", timeout=10).status_code == 200
