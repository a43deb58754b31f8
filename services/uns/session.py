"""One MQTT session of an edge node: a new paho client per CONNECT.

``reconnect_on_failure`` is off: a new CONNECT must carry a new ``bdSeq`` in its
Will, and nothing queued for a lost session (whose seq numbers the host no
longer expects) may be sent on the next. paho's callbacks run on paho's
network thread and only ``put`` what happened, with the client it happened
to, in the node's inbox."""

from __future__ import annotations

from collections.abc import Callable

import paho.mqtt.client as mqtt

from services.uns.port import Message

KEEPALIVE_SECONDS = 5  # the broker sends the Will 1.5 keep-alives after the publisher goes silent
MAX_INFLIGHT = 1000


def open_session(settings, client_id: str, wills: list[Message], put: Callable[[tuple], None]) -> mqtt.Client:
    """A new client connecting (asynchronously) to ``LINECTL_MQTT_URL`` with ``wills`` registered."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True,
                         reconnect_on_failure=False)
    client.max_inflight_messages_set(MAX_INFLIGHT)
    # paho's own retry of a failed first CONNECT sleeps this long, and ending the session waits for it
    client.reconnect_delay_set(0.05, 0.05)
    for will in wills:
        client.will_set(will.topic, will.payload, will.qos, will.retain)
    if settings.mqtt_username:
        client.username_pw_set(settings.mqtt_username, settings.mqtt_password())
    if settings.mqtt_tls:
        client.tls_set_context(settings.mqtt_ssl_context())
    client.on_connect = lambda c, _u, _f, rc, _p: put(("connected", c, rc))
    client.on_disconnect = lambda c, _u, _f, rc, _p: put(("disconnected", c, rc))
    client.on_connect_fail = lambda c, _u: put(("unreachable", c))
    client.on_publish = lambda c, _u, mid, _rc, _p: put(("puback", c, mid))
    client.on_message = lambda c, _u, msg: put(("message", c, msg.topic, msg.payload))
    host, port = settings.mqtt_endpoint()
    client.connect_async(host, port, keepalive=KEEPALIVE_SECONDS)
    return client
