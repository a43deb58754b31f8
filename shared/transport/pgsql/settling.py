"""Delivered messages of the pgsql:// transport and their settling (ack, reject,
requeue), as kombu's virtual transport asks a channel for them."""

from __future__ import annotations

import logging

import psycopg2
from kombu.transport import virtual

log = logging.getLogger("shared.transport.pgsql.channel")


class Message(virtual.Message):
    """A delivered message, with its properties shaped as pyamqp's."""

    def __init__(self, payload, channel=None, **kwargs):
        super().__init__(payload, channel=channel, **kwargs)
        self.row_id = payload.get("row_id")
        props = self.properties
        props["content_type"] = self.content_type
        props["content_encoding"] = self.content_encoding
        props["application_headers"] = self.headers


class QoS(virtual.QoS):
    """Prefetch bookkeeping; ack deletes the row, requeue clears its lease.

    A direct reply has no row (``row_id`` None): settling it changes nothing,
    and a requeue of one is a drop, as with RabbitMQ's direct reply-to.
    """

    def ack(self, delivery_tag):
        message = self._delivered.get(delivery_tag)
        if message is not None and delivery_tag not in self._dirty and message.row_id is not None:
            self.channel._ack_later(message.row_id)
        super().ack(delivery_tag)
        self.channel._room_made()

    def reject(self, delivery_tag, requeue=False):
        message = self._delivered.get(delivery_tag)
        if message is not None and delivery_tag not in self._dirty and message.row_id is not None:
            try:
                if requeue:
                    self.channel._release_rows([message.row_id])
                else:
                    self.channel._delete_rows([message.row_id])
            except psycopg2.Error as exc:
                # The session is gone (a restart, a failover): its claim ended with it,
                # and the sweep hands the message out again, as a broker reclaims the
                # unacked messages of a lost connection. A consumer (nameko's) must not
                # die of it.
                log.warning("settling message %s on a lost session (%s): it is redelivered",
                            message.row_id, type(exc).__name__)
        self._quick_ack(delivery_tag)
        self.channel._room_made()

    def restore_unacked(self):
        self._flush()
        ids = [message.row_id for message in self._delivered.values() if message.row_id is not None]
        self._delivered.clear()
        if ids:
            try:
                self.channel._release_rows(ids)
            except psycopg2.Error as exc:  # the session is gone, its claims with it: the sweep redelivers
                log.info("%d unacked message(s) left to the sweep (%s)", len(ids), type(exc).__name__)
        return []
