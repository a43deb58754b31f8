"""A second process for the kombu conformance tests.

``python -m tests.transport.kombu_peer URL MODE SPEC_JSON``: declares the queues
of SPEC (``[[exchange, type, queue, binding_key(, queue_arguments)], ...]``), prints
``ready``, then

* ``consume``: prints each message body as a JSON line and acks it;
* ``hold``: prints the first message body and keeps it unacked forever
  (the test kills this process with SIGKILL).
"""

import json
import sys

from kombu import Connection, Consumer, Exchange, Queue

import shared  # noqa: F401  (registers pgsql://)


def main(url, mode, spec):
    queues = [Queue(queue, Exchange(exchange, type), routing_key=key,
                    queue_arguments=(arguments[0] if arguments else None))
              for exchange, type, queue, key, *arguments in spec]
    held = []

    def on_message(body, message):
        print(json.dumps(body), flush=True)
        if mode == "consume":
            message.ack()
        else:
            held.append(message)

    with Connection(url) as conn, Consumer(conn, queues, callbacks=[on_message]) as consumer:
        consumer.qos(prefetch_count=1)
        print("ready", flush=True)
        while True:
            try:
                conn.drain_events(timeout=1)
            except TimeoutError:
                pass


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
