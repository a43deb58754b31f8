"""A line's edge node whose broker is away tries again after its back-off
(docs/uns.md, "Broker restart": 0.5 s, then twice as long after each failure, up
to ``LINECTL_MQTT_RECONNECT_MAX_SECONDS``), not at its log's next poll: the
node's thread waited for its inbox for up to 2 s between two tries, so a broker
back after a restart was met up to 2 s late whatever the back-off said. The
broker is a port nothing listens on; the node's row is in a real line database."""

from __future__ import annotations

import time

from sqlalchemy import text

from services.uns.node import EdgeNode
from services.uns.outbox import LineOutbox
from services.uns.publisher import formats_for
from shared.config import load_settings
from shared.layout import load_layout
from tests.support.ports import free_port
from tests.support.waiting import wait_for


def test_a_node_tries_again_at_its_back_off_not_at_its_next_poll(engine):
    settings = load_settings({"LINECTL_MQTT_URL": f"mqtt://127.0.0.1:{free_port()}",
                              "LINECTL_MQTT_RECONNECT_MAX_SECONDS": "0.2"})
    outbox = LineOutbox(engine, "demo-cell", default=True)
    node = EdgeNode(settings, "demo-cell", load_layout(settings.line_file), outbox, formats_for("sparkplug", settings),
                    "test-plant")

    def tries() -> int:  # each CONNECT saves its own bdSeq first
        with engine.connect() as conn:
            return conn.execute(text("SELECT bd_seq FROM uns_node WHERE line_id = 'demo-cell'")).scalar() or 0

    node.start()
    try:
        wait_for(lambda: tries() >= 1, 10, 0.02, "the first try")
        first = time.monotonic()
        wait_for(lambda: tries() >= 6, 10, 0.02, "five more tries")
        # 0.5 s capped to 0.2 s: five more tries in about a second (a try a poll: 10 s)
        assert time.monotonic() - first < 4.0
        assert node.client is None or not node.connected
    finally:
        node.stop()
