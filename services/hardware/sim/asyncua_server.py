"""What the simulator's OPC UA server needs of asyncua's ``Server`` that asyncua
has no setting for: one user name and password, a floor under the publishing
interval, a method's arguments described, a stop that does not wait for its
clock, and the standard address space built once per process."""

from __future__ import annotations

import asyncio
import pickle
import threading
from collections.abc import MutableMapping

from asyncua import Server, ua
from asyncua.crypto.permission_rules import User, UserRole
from asyncua.server.standard_address_space import standard_address_space


class StandardAddressSpace:
    """asyncua's standard address space (6,000 nodes, 0.7 CPU-s to build) for every
    server a process starts after its second.

    The second server's nodes are kept pickled one by one, straight after they are
    built; a later server starts from that copy and unpickles a node when it first
    touches it, as asyncua's own shelf does (``load_aspace_shelf``), in memory. A
    process that starts one server (``linectl sim``) never pays for the copy; the
    suite starts about a hundred."""

    def __init__(self, kept_build: int = 2):
        self._kept_build = kept_build  # which build's nodes are kept (1: the first)
        self._lock = threading.Lock()
        self._built = 0
        self._pickled: dict[str, bytes] | None = None

    def install(self, server: Server) -> None:
        """Before ``server.init()``: its standard nodes come from here."""
        iserver = server.iserver

        async def load_standard_address_space(shelf_file=None):
            with self._lock:
                pickled, self._built = self._pickled, self._built + 1
                keep = pickled is None and self._built == self._kept_build
            if pickled is not None:
                iserver.aspace._nodes = LazyNodes(pickled)
                return
            await asyncio.to_thread(standard_address_space.fill_address_space, iserver.node_mgt_service)
            if keep:
                self._pickled = {node_id.to_string(): pickle.dumps(node, pickle.HIGHEST_PROTOCOL)
                                 for node_id, node in iserver.aspace._nodes.items()}

        iserver.load_standard_address_space = load_standard_address_space


class LazyNodes(MutableMapping):
    """A server's nodes: its own, and the shared pickled standard ones, each
    unpickled (a copy of its own) the first time it is touched."""

    def __init__(self, pickled: dict[str, bytes]):
        self._pickled = pickled
        self._nodes: dict = {}
        self._deleted: set[str] = set()

    def _standard(self, node_id) -> str | None:
        key = node_id.to_string() if isinstance(node_id, ua.NodeId) else None
        return key if key in self._pickled and key not in self._deleted else None

    def __getitem__(self, node_id):
        try:
            return self._nodes[node_id]
        except KeyError:
            key = self._standard(node_id)
            if key is None:
                raise
            node = self._nodes[node_id] = pickle.loads(self._pickled[key])
            return node

    def __setitem__(self, node_id, node) -> None:
        self._nodes[node_id] = node

    def __delitem__(self, node_id) -> None:
        key = self._standard(node_id)
        if key is None and node_id not in self._nodes:
            raise KeyError(node_id)
        self._nodes.pop(node_id, None)
        if key is not None:
            self._deleted.add(key)

    def __contains__(self, node_id) -> bool:
        return node_id in self._nodes or self._standard(node_id) is not None

    def __iter__(self):
        yield from list(self._nodes)
        for key in self._pickled:
            node_id = ua.NodeId.from_string(key)
            if node_id not in self._nodes and key not in self._deleted:
                yield node_id

    def __len__(self) -> int:
        return sum(1 for _ in self)


class PasswordUsers:
    """One user name and password (asyncua's UserManager protocol)."""

    def __init__(self, user: str, password: str):
        self.user, self.password = user, password

    def get_user(self, iserver, username=None, password=None, certificate=None):
        if username == self.user and password == self.password:
            return User(role=UserRole.User, name=username)
        return None


def publish_no_faster(server: Server, interval_ms: float) -> None:
    """Revise every CreateSubscription's publishing interval up to ``interval_ms``
    (asyncua grants the requested one and has no setting for a floor)."""
    service = server.iserver.subscription_service
    create = service.create_subscription

    async def create_subscription(params, *args, **kwargs):
        params.RequestedPublishingInterval = max(params.RequestedPublishingInterval, interval_ms)
        return await create(params, *args, **kwargs)

    service.create_subscription = create_subscription


def method_argument(name: str, type_name: str) -> ua.Argument:
    arg = ua.Argument()
    arg.Name = name
    array = type_name.endswith("[]")
    arg.DataType = ua.NodeId(getattr(ua.ObjectIds, type_name.removesuffix("[]")))
    arg.ValueRank = 1 if array else -1
    arg.ArrayDimensions = [0] if array else []
    arg.Description = ua.LocalizedText(name)
    return arg


async def stop_now(server: Server) -> None:
    """Stop at once. asyncua's stop lets its clock task (it writes the server's
    CurrentTime, then sleeps 1 s) end its sleep: every stop took 1 s. The
    clock is cancelled first instead; nothing reads it once the server stops."""
    clock, server.iserver.time_task = server.iserver.time_task, None
    if clock is not None:
        clock.cancel()
        try:
            await clock
        except asyncio.CancelledError:
            pass
    await server.stop()


# One per process: every simulator server of the process shares it.
STANDARD_ADDRESS_SPACE = StandardAddressSpace()
