"""The publisher's fence holds at the moment of sending, not only at the top of a
node's turn: a turn may wait up to a poll for its inbox after the check, and a
lock lost meanwhile must stop the send (another publisher may own the node)."""

import pytest

from services.uns.node import EdgeNode
from services.uns.port import Message


class _Client:
    def __init__(self):
        self.published = []

    def publish(self, topic, payload, qos, retain):
        self.published.append(topic)


def test_a_node_whose_fence_lapsed_sends_nothing():
    node = EdgeNode.__new__(EdgeNode)  # only what _send reads
    node.client, node.counters, node._unsaved_messages = _Client(), None, 0
    node.may_publish = lambda: False
    with pytest.raises(RuntimeError, match="lock is not confirmed"):
        node._send([Message("spBv1.0/g/NDATA/cell-a", b"x")], None)
    assert node.client.published == []
