"""The publisher port: one edge node's messages, in the format the plant asked for.

As a kombu transport sits behind kombu's Connection, a format sits behind the
edge node (``services.uns.node``): the node owns the MQTT session, the outbox
and the acknowledgements; a format only says which messages a birth, a loop
transaction, a device's death or a clean stop are, and what a command on its
topics means. Two formats (``LINECTL_MQTT_FORMAT``):

* ``sparkplug`` (``services.uns.sparkplug``): Sparkplug B 3.0 on ``spBv1.0/…``;
* ``json`` (``services.uns.json_topics``): retained state topics and an events
  topic per line under ``LINECTL_UNS_PREFIX``;

``both`` runs the two side by side on the node's one session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from services.uns.model import Catalog, Change, FinishedPiece, LineModel


@dataclass(frozen=True)
class Message:
    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = False


@dataclass(frozen=True)
class Command:
    """What a message on a command topic asks: ``rebirth``, or refused (``refused`` says why)."""
    rebirth: bool = False
    refused: str | None = None
    detail: dict | None = None


class NodeView(Protocol):
    """What a format may ask of its edge node."""
    group: str
    line_id: str
    bd_seq: int
    catalog: Catalog
    model: LineModel | None

    def next_seq(self) -> int: ...
    def first_seq(self) -> int: ...


class Format(Protocol):
    name: str

    def will(self, node: NodeView) -> Message | None:
        """The MQTT Will registered with the session's CONNECT."""

    def subscriptions(self, node: NodeView) -> list[str]:
        """Command topics the node listens on."""

    def birth(self, node: NodeView, model: LineModel, live_devices: list[str]) -> list[Message]: ...

    def transaction(self, node: NodeView, frames: list[dict], changes: list[Change], *, historical: bool,
                    dead_devices: frozenset[str], pieces: list[FinishedPiece] = ()) -> list[Message]:
        """One loop transaction: its events, what they changed, the pieces it finished."""

    def values(self, node: NodeView, changes: list[Change], *, at: int, dead_devices: frozenset[str]) -> list[Message]:
        """Changes no event carries (the line's controller seen to come or go)."""

    def device_death(self, node: NodeView, device: str, at: int) -> list[Message]: ...

    def device_birth(self, node: NodeView, model: LineModel, device: str) -> list[Message]: ...

    def death(self, node: NodeView) -> list[Message]:
        """A clean stop's last words (Sparkplug: the NDEATH the Will would have sent)."""

    def command(self, node: NodeView, topic: str, payload: bytes) -> Command | None:
        """A message on one of its topics (None: not its topic)."""

