"""``python -m tests.transport.nameko_peer AMQP_URI``: runs the Greeter service
in its own process, prints ``ready`` once it consumes."""

import eventlet

eventlet.monkey_patch()

import sys  # noqa: E402

from nameko.runners import ServiceRunner  # noqa: E402

import shared  # noqa: E402,F401  (registers pgsql://)
from tests.transport.nameko_services import Greeter  # noqa: E402


def main(amqp_uri):
    runner = ServiceRunner({"AMQP_URI": amqp_uri, "serializer": "json"})
    runner.add_service(Greeter)
    runner.start()
    print("ready", flush=True)
    runner.wait()


if __name__ == "__main__":
    main(sys.argv[1])
