"""``python -m gateway --name gateway``: serve the gateway with gunicorn
(``gthread`` workers, as a library) on ``LINECTL_HTTP_HOST:LINECTL_HTTP_PORT``.
The worker is ``gateway.edge_worker.EnvelopeWorker``: gthread, with the
requests gunicorn refuses answered in the JSON error envelope.

``LINECTL_GATEWAY_WORKERS`` processes (default one per core) share the port.
Each builds its own app after the fork (its own DB pools, RPC pool, event
relay and AI expiry sweeper): nothing with a socket crosses a fork. The AI
queue scales with them, since every process serves it straight from
PostgreSQL; each process streams every event over its own relay queue.

This process does NOT monkey-patch eventlet. gthread serves each request on
a real OS thread; under monkey-patching those threads would become green
threads on one OS thread, where any call eventlet does not cooperate with
(psycopg2 without a wait callback) would stall every request at once. Open
websockets hold no request thread: after the handshake they belong to the
process's StreamHub (``gateway.stream_hub``), one thread with non-blocking
sockets. Nothing here needs green threads: nameko's standalone
``ClusterRpcProxy`` (the RPC pool) and the kombu consumer of ``gateway.relay``
are plain blocking-socket code, correct on real threads. nameko (and with it
eventlet) is imported here at module level, in the main thread before any
worker thread exists, never lazily in a thread.

Metrics add up across the workers (``gateway.metrics``): each keeps its values
in files under ``<LINECTL_DATA_DIR>/gateway-metrics/<port>``, emptied when the
master has bound its port (so only the gateway that holds the port clears it)
and before the first worker starts; a worker that exits is marked dead there.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import signal
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

import nameko.standalone.events  # noqa: E402,F401 - see the module docstring
import nameko.standalone.rpc  # noqa: E402,F401
from gunicorn.app.base import BaseApplication  # noqa: E402
from gunicorn.arbiter import Arbiter  # noqa: E402

from gateway import metrics  # noqa: E402
from gateway.app import create_app  # noqa: E402
from gateway.context import gateway_context  # noqa: E402
from gateway.errors import REQUEST_LIMITS  # noqa: E402
from gateway.tls_front import start_front  # noqa: E402
from shared.config import SettingsError, check_bind, ensure_tokens, load_settings  # noqa: E402
from shared.plant import PlantError, plant_of  # noqa: E402


class GatewayArbiter(Arbiter):
    """gunicorn's master, but SIGHUP makes every worker re-read the tokens file
    instead of gunicorn's reload (new workers, the old ones stopped: every open
    websocket would drop, and the settings would not be read again anyway)."""

    def handle_hup(self):
        self.log.info("SIGHUP: the workers re-read the tokens")
        self.kill_workers(signal.SIGHUP)


class GatewayServer(BaseApplication):
    """gunicorn as a library; ``load()`` runs in each worker after the fork."""

    def __init__(self, settings, options: dict, metrics_dir: Path):
        self.settings = settings
        self.options = options
        self.metrics_dir = metrics_dir
        self.apps = []
        self.hangups = 0  # SIGHUPs this worker has had: one during load() is applied after it
        super().__init__()

    def load_config(self):
        for key, value in self.options.items():
            self.cfg.set(key, value)
        self.cfg.set("worker_exit", self._worker_exit)
        self.cfg.set("when_ready", self._when_ready)
        self.cfg.set("child_exit", self._child_exit)

    def _when_ready(self, _arbiter):
        # In the master, after the bind and before any worker: this start's counts only.
        metrics.clean_worker_files(self.metrics_dir)

    def _child_exit(self, _arbiter, worker):
        metrics.worker_exited(worker.pid, self.metrics_dir)

    def load(self):
        hangups = self.hangups
        app = create_app(self.settings)
        gateway_context(app).start_background()
        self.apps.append(app)
        if self.hangups != hangups:  # the file may have changed after create_app read it
            gateway_context(app).tokens.request_refresh()
        return app

    def reread_tokens(self) -> None:
        """SIGHUP in a worker (``EnvelopeWorker`` routes it here from its signal
        set-up on, before the app loads): every app re-reads the tokens file."""
        self.hangups += 1
        for app in self.apps:
            gateway_context(app).tokens.request_refresh()

    def run(self):
        try:
            GatewayArbiter(self).run()
        except RuntimeError as exc:  # as BaseApplication.run: gunicorn's start-up errors
            print(f"\nError: {exc}\n", file=sys.stderr)
            sys.exit(1)
        except SystemExit as halted:  # the master has stopped and reaped its workers
            _leave_now(halted.code)

    def _worker_exit(self, _server, _worker):
        for app in self.apps:
            gateway_context(app).close()
        # gunicorn calls this hook while the worker's SystemExit is on its way out.
        leaving = sys.exc_info()[1]
        _leave_now(leaving.code if isinstance(leaving, SystemExit) else 1)


def _leave_now(code) -> None:
    """End the process once its own cleanup is done, as multiprocessing's children
    do (os._exit): the interpreter's teardown touched every object a worker
    inherited from the master (copy-on-write faults), 0.6 s of every stop, and
    took the master a few tenths more."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


# HTTP connections per worker that are not (yet) websockets: gunicorn stops
# accepting beyond it, so a flood of idle connections cannot take the fds the
# streams need (an accept() failing with EMFILE ends the worker, and every
# stream with it).
HTTP_CONNECTIONS = 1000
FDS_BESIDE = 256  # pools, the relay, the listening socket, log files


def _open_file_room(streams: int) -> tuple[int, int]:
    """(streams, HTTP connections) that fit the open-file limit, raised toward the
    hard limit first. When even that is too low, both shrink (and say so), a
    third of the room for HTTP, rather than fail accept() later."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = streams + HTTP_CONNECTIONS + FDS_BESIDE
    if soft != resource.RLIM_INFINITY and soft < wanted:
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return streams, HTTP_CONNECTIONS
    room = max(soft - FDS_BESIDE, 0)
    http = min(HTTP_CONNECTIONS, room // 3)
    fewer = min(streams, room - http)
    logging.getLogger("gateway").warning(
        "open-file limit %d: at most %d websocket streams and %d HTTP connections per process",
        soft, fewer, http)
    return fewer, http


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__.split("\n")[0])
    parser.add_argument("--name", default="gateway", help="process name (shows in ps)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads per worker for HTTP requests (open websockets take none)"
                             " (default LINECTL_GATEWAY_THREADS)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (default LINECTL_GATEWAY_WORKERS, 0 = one per core)")
    args = parser.parse_args(argv)
    try:
        settings = ensure_tokens(load_settings())
        if not settings.database_url:
            raise SettingsError("LINECTL_DATABASE_URL: the gateway needs the database URL")
        check_bind(settings)
        plant_of(settings)  # a bad plant file stops the start, naming what is wrong (not each worker)
    except (SettingsError, PlantError) as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.workers is not None:
        settings = settings.replace(gateway_workers=args.workers)
    streams, http_connections = _open_file_room(settings.ws_max_clients)
    settings = settings.replace(ws_max_clients=streams)
    options = {
        "bind": f"{settings.http_host}:{settings.http_port}",
        "workers": settings.gateway_worker_count,
        # gthread, answering gunicorn's own refusals in the error envelope
        "worker_class": "gateway.edge_worker.EnvelopeWorker",
        **REQUEST_LIMITS,
        "threads": args.threads or settings.gateway_threads,
        "worker_connections": http_connections,
        "proc_name": args.name,
        "control_socket_disable": True,
        "graceful_timeout": 5,
        "keepalive": 5,
        "loglevel": settings.log_level.lower(),
    }
    metrics_dir = Path(settings.data_dir).resolve() / "gateway-metrics" / str(settings.http_port)
    metrics.use_worker_files(metrics_dir)
    start_front(settings, options)  # TLS: HTTPS and wss on the port, gunicorn behind it on loopback
    GatewayServer(settings, options, metrics_dir).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
