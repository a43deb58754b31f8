"""Gateway settings: where it listens, its worker processes and threads, its
websocket streams' limits, and how long a command waits for the loop."""

from __future__ import annotations

import dataclasses
import os

from .parse import parse_float, parse_int


@dataclasses.dataclass(frozen=True)
class GatewaySettings:
    http_host: str = "127.0.0.1"
    http_port: int = 8000
    command_wait_seconds: float = 2.0
    # Gateway worker processes; 0 -> one per CPU core. Each serves the AI queue
    # straight from PostgreSQL and streams every event over its own relay.
    gateway_workers: int = 0
    # Request threads per worker: as many as the AI queue's pooled connections
    # (gateway.app.AI_POOL_SIZE). More only wait for a connection while they
    # contend for the GIL: at 200 runtimes 64 threads served fewer cycles/s
    # than 16 (tests/bench/bench_ai_jobs.py). An open websocket takes none, and
    # an idle connection holds one for 0.2 s at most (gateway.edge_worker).
    gateway_threads: int = 16
    # Websocket streams (gateway/stream_hub.py): open streams per gateway process
    # (each costs a socket and its send queue, no thread); the largest client
    # message (the stream reads none: pings only); how long a reader may make no
    # progress before it is told to resume later and closed.
    ws_max_clients: int = 2000
    ws_max_message_bytes: int = 4096
    ws_send_timeout_seconds: float = 10.0
    # A line DOWN for less than this is a micro-stop, not a stop (docs/oee.md).
    microstop_seconds: float = 30.0

    @property
    def gateway_worker_count(self) -> int:
        return self.gateway_workers or max(os.cpu_count() or 1, 1)


PARSERS = {
    "HTTP_HOST": ("http_host", lambda n, r: r.strip()),
    "HTTP_PORT": ("http_port", lambda n, r: parse_int(n, r, 1, 65535)),
    "COMMAND_WAIT_SECONDS": ("command_wait_seconds", lambda n, r: parse_float(n, r, 0.0, 300.0)),
    "GATEWAY_WORKERS": ("gateway_workers", lambda n, r: parse_int(n, r, 0, 64)),
    "GATEWAY_THREADS": ("gateway_threads", lambda n, r: parse_int(n, r, 4, 1024)),
    "WS_MAX_CLIENTS": ("ws_max_clients", lambda n, r: parse_int(n, r, 0, 100_000)),
    "WS_MAX_MESSAGE_BYTES": ("ws_max_message_bytes", lambda n, r: parse_int(n, r, 125, 1024 * 1024)),
    "WS_SEND_TIMEOUT_SECONDS": ("ws_send_timeout_seconds", lambda n, r: parse_float(n, r, 0.5, 600.0)),
    "MICROSTOP_SECONDS": ("microstop_seconds", lambda n, r: parse_float(n, r, 0.0, 3600.0)),
}
