"""Free TCP ports for the servers the tests start.

Each shard of the suite (tests/run_suite.py) hands out ports from a block of its own, below the
kernel's ephemeral range (``ip_local_port_range``, 32768 and up on Linux):
two shards never pick the same port, and no outgoing connection's local port
(always drawn from the ephemeral range) can take a picked port between the
pick and the server's bind, as a port the kernel chose for ``bind(0)`` could.
Within a shard the ports go round the block, so one test's several servers
get different ports, and a port is handed out only if nothing holds it now.
"""

from __future__ import annotations

import itertools
import os
import random
import socket

from shared.db.embedded import port_bindable

FIRST_PORT = 20000
BLOCK = 1500  # ports per shard: 8 shards end at 32000, below the ephemeral range


def worker_index() -> int:
    """The shard's number (``LINECTL_TEST_SHARD``, from 0); 0 for a plain pytest run."""
    raw = os.environ.get("LINECTL_TEST_SHARD", "0")
    return int(raw) if raw.isdigit() else 0


def _block() -> range:
    start = FIRST_PORT + (worker_index() % 8) * BLOCK
    return range(start, start + BLOCK)


# Starts at a random place so that two sessions on one machine (two checkouts) seldom meet.
_next = itertools.cycle(random.sample(_block(), len(_block())))


def _bindable(port: int) -> bool:
    # No SO_REUSEADDR: a port with a connection in TIME_WAIT is passed over too.
    return port_bindable(port, reuse_address=False)


def free_port() -> int:
    for _ in range(BLOCK):
        port = next(_next)
        if _bindable(port):
            return port
    raise RuntimeError(f"no free port left in {_block()}")


def free_port_run(count: int, avoid: tuple[int, ...] = ()) -> int:
    """The first of ``count`` consecutive free ports of the shard's block, none in
    ``avoid`` (ports already handed out but not bound yet): a plant's simulators
    listen on ``LINECTL_SIM_PORT`` plus each line's place in the plant."""
    block = _block()
    for _ in range(BLOCK):
        first = next(_next)
        run = range(first, first + count)
        if run[-1] in block and not set(run) & set(avoid) and all(_bindable(p) for p in run):
            return first
    raise RuntimeError(f"no {count} consecutive free ports left in {block}")


def answers(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server accepts a TCP connection on ``host:port`` now."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
