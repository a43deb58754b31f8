"""Gateway settings: where it listens, its worker processes and threads, its
websocket streams' limits, and how long a command waits for the loop."""

from __future__ import annotations

import dataclasses
import os

from .parse import floats, ints, setting, stripped


@dataclasses.dataclass(frozen=True)
class GatewaySettings:
    http_host: str = setting("127.0.0.1", stripped)
    http_port: int = setting(8000, ints(1, 65535))
    command_wait_seconds: float = setting(2.0, floats(0.0, 300.0))
    # Gateway worker processes; 0 -> one per CPU core. Each serves the AI queue
    # straight from PostgreSQL and streams every event over its own relay.
    gateway_workers: int = setting(0, ints(0, 64))
    # Request threads per worker: as many as the AI queue's pooled connections
    # (gateway.app.AI_POOL_SIZE). More only wait for a connection while they
    # contend for the GIL: at 200 runtimes 64 threads served fewer cycles/s
    # than 16 (tests/bench/bench_ai_jobs.py). An open websocket takes none, and
    # an idle connection holds one for 0.2 s at most (gateway.edge_worker).
    gateway_threads: int = setting(16, ints(4, 1024))
    # Websocket streams (gateway/stream_hub.py): open streams per gateway process
    # (each costs a socket and its send queue, no thread); the largest client
    # message (the stream reads none: pings only); how long a reader may make no
    # progress before it is told to resume later and closed.
    ws_max_clients: int = setting(2000, ints(0, 100_000))
    ws_max_message_bytes: int = setting(4096, ints(125, 1024 * 1024))
    ws_send_timeout_seconds: float = setting(10.0, floats(0.5, 600.0))
    # A line DOWN for less than this is a micro-stop, not a stop (docs/oee.md).
    microstop_seconds: float = setting(30.0, floats(0.0, 3600.0))

    @property
    def gateway_worker_count(self) -> int:
        return self.gateway_workers or max(os.cpu_count() or 1, 1)
