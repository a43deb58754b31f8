"""Opening one OPC UA session for the driver (:mod:`.opcua`): the client's
timeouts, its security and credentials (deploy/OPCUA_MAP.md), the loss
callback, NodeIds resolved against the server's namespace array, and what a
failure means to the port (:class:`PlcUnavailable`). Runs on the driver's loop,
except :func:`load_credentials` (plain files, read in a green thread)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from asyncua import Client, ua
from asyncua.crypto import security_policies, uacrypto

from services.hardware.device.port import PlcUnavailable
from services.hardware.opcua_certs import certificate_directory, ensure_certificate, read_certificate

CLIENT_APP_URI = "urn:linectl:hardware"
# The subscription asked for: published every 10 ms; each item sampled as fast as the
# server can (0: its fastest practical rate; a server that samples slower than a
# change lasts never sees it); up to 64 values kept per item between two publishes,
# the oldest dropped first should more come (the newest, the state now, is never
# dropped; the cell makes a handful of edges per item per publish).
PUBLISHING_INTERVAL_MS = 10
SAMPLING_INTERVAL_MS = 0.0
QUEUE_SIZE = 64
# Opening a session (hello, secure channel, session, activation) may take this many request timeouts.
CONNECT_TIMEOUTS = 2


def load_credentials(options: dict[str, Any]) -> dict[str, Any]:
    """The client's certificate and key (given, or generated once under the data
    directory), the pinned server certificate if any, the user and password."""
    opts = options
    if opts.get("cert") and opts.get("key"):
        cert, cert_format = read_certificate(Path(opts["cert"]))
        key = Path(opts["key"]).read_bytes()
    elif opts.get("cert") or opts.get("key"):
        raise ValueError("LINECTL_OPCUA_CERT and LINECTL_OPCUA_KEY go together")
    else:
        cert, key = ensure_certificate(certificate_directory(opts), "linectl-hardware",
                                       CLIENT_APP_URI, server=False)
        cert_format = "der"
    server_cert = read_certificate(Path(opts["server_cert"])) if opts.get("server_cert") else None
    key_format = "pem" if key.lstrip().startswith(b"-----BEGIN") else "der"
    return {"cert": (cert, cert_format), "key": (key, key_format), "server_cert": server_cert,
            "user": str(opts["user"]), "password": str(opts["password"])}


def _new_client(url: str, timeout: float) -> tuple[Client, asyncio.Event]:
    """A client for ``url`` and the event its session's loss sets (``.reason`` says why)."""
    # asyncua probes the server's state every watchdog interval and gives the probe
    # that long to answer (min(session timeout / 2, interval)): at 1 s a busy server
    # or host lost the session for nothing. The request timeout is the bound.
    client = Client(url, timeout=timeout, watchdog_intervall=max(timeout, 1.0))
    client.application_uri = CLIENT_APP_URI
    client.session_timeout = 600_000  # what servers grant (asyncua asks an hour, then warns)
    client.name = client.description = "linectl hardware service"
    lost = asyncio.Event()
    lost.reason = ""

    async def on_lost(exc):
        lost.reason = f"{type(exc).__name__}: {exc}"
        lost.set()

    client.connection_lost_callback = on_lost
    return client, lost


async def _secure(client: Client, credentials: dict[str, Any]) -> None:
    """Basic256Sha256 SignAndEncrypt with the client's certificate and a user."""
    c = credentials
    server_cert = (uacrypto.CertProperties(c["server_cert"][0], extension=c["server_cert"][1])
                   if c["server_cert"] else None)
    await client.set_security(
        security_policies.SecurityPolicyBasic256Sha256,
        uacrypto.CertProperties(c["cert"][0], extension=c["cert"][1]),
        uacrypto.CertProperties(c["key"][0], extension=c["key"][1]),
        server_certificate=server_cert, mode=ua.MessageSecurityMode.SignAndEncrypt)
    client.set_user(c["user"])
    client.set_password(c["password"])


async def connect(url: str, timeout: float, credentials: dict[str, Any] | None) -> tuple[Client, asyncio.Event]:
    """A connected client (session activated) and its loss event."""
    client, lost = _new_client(url, timeout)
    if credentials is not None:
        await _secure(client, credentials)
    await asyncio.wait_for(client.connect(), timeout * CONNECT_TIMEOUTS)
    return client, lost


async def disconnect(client: Client) -> None:
    """End a session, whatever state it is in (bounded, errors ignored)."""
    try:
        await asyncio.wait_for(client.disconnect(), 1.0)
    except Exception:
        pass


async def subscribe(client: Client, nodes: list, handler) -> dict[str, Any]:
    """A subscription with a monitored item per node, asked as above; returns what
    the server granted (publishing interval; the sampling intervals and queue sizes
    it revised). A node it refuses to monitor fails the session: its edges would
    never come."""
    sub = await client.create_subscription(PUBLISHING_INTERVAL_MS, handler)
    requests = [_monitor(node, handle) for handle, node in enumerate(nodes, start=1)]
    # Subscription.create_monitored_items keeps only the ids of its results; the
    # revised values are read on the way, on this session object, for this one call.
    session, granted = sub.server, []

    async def create_and_keep(params):
        results = await type(session).create_monitored_items(session, params)
        granted.extend(results)
        return results

    session.create_monitored_items = create_and_keep
    try:
        await sub.create_monitored_items(requests)
    finally:
        del session.create_monitored_items
    refused = [f"{n.nodeid.to_string()}: {r.StatusCode.name}" for n, r in zip(nodes, granted, strict=True)
               if not r.StatusCode.is_good()]
    if refused:
        raise PlcUnavailable("PLC_ERROR", f"the server refused to monitor {', '.join(refused)}"[:300])
    return {"publishing": sub.parameters.RequestedPublishingInterval,
            "sampling": sorted({r.RevisedSamplingInterval for r in granted}),
            "queue": sorted({r.RevisedQueueSize for r in granted})}


def _monitor(node, handle: int) -> ua.MonitoredItemCreateRequest:
    item = ua.ReadValueId()
    item.NodeId = node.nodeid
    item.AttributeId = ua.AttributeIds.Value
    params = ua.MonitoringParameters()
    params.ClientHandle = handle
    params.SamplingInterval = SAMPLING_INTERVAL_MS
    params.QueueSize = QUEUE_SIZE
    params.DiscardOldest = True
    request = ua.MonitoredItemCreateRequest()
    request.ItemToMonitor = item
    request.MonitoringMode = ua.MonitoringMode.Reporting
    request.RequestedParameters = params
    return request


def granted_text(granted: dict[str, Any]) -> str:
    """One line: what the server granted, beside what was asked."""
    def span(values: list) -> str:
        return f"{values[0]:g}" if len(values) == 1 else f"{values[0]:g}-{values[-1]:g}"
    return (f"publishing every {granted['publishing']:g} ms (asked {PUBLISHING_INTERVAL_MS}), sampling "
            f"{span(granted['sampling'])} ms (asked {SAMPLING_INTERVAL_MS:g}: the fastest), queues of "
            f"{span(granted['queue'])} (asked {QUEUE_SIZE})")


def resolve(node_id: str, namespaces: list[str]) -> ua.NodeId:
    """A NodeId string, ``nsu=<uri>;…`` resolved against the server's namespace array."""
    if node_id.startswith("nsu="):
        uri, _, rest = node_id[4:].partition(";")
        if uri not in namespaces:
            raise PlcUnavailable("PLC_ERROR", f"the server has no namespace {uri!r} (deploy/OPCUA_MAP.md)")
        node_id = f"ns={namespaces.index(uri)};{rest}"
    return ua.NodeId.from_string(node_id)


async def read_identity(client: Client, node_id: str, namespaces: list[str]) -> str | None:
    """What the server says it is: ``Cell/Identity`` (or the layout's NodeId for it,
    ``node_id``); None for a server without it (no such namespace or node, or not a
    String). Read before anything else of a session (device/identity.py)."""
    try:
        node = client.get_node(resolve(node_id, namespaces))
    except PlcUnavailable:  # no namespace of the map: not this map's PLC at all
        return None
    try:
        value = await node.read_value()
    except ua.UaStatusCodeError:  # BadNodeIdUnknown and the like: no identity published
        return None
    return value if isinstance(value, str) else None


def variants(args: list[tuple[Any, str]]) -> list[ua.Variant]:
    """Method inputs given as (value, variant type name; ``[]`` for an array)."""
    return [ua.Variant(v, getattr(ua.VariantType, t.removesuffix("[]"))) for v, t in args]


def link_error(exc: BaseException, what: str) -> PlcUnavailable:
    """What a failed request means to the port: the server's refusal (a status
    code) is the PLC's answer; anything else is the link."""
    if isinstance(exc, PlcUnavailable):
        return exc
    if isinstance(exc, ua.UaStatusCodeError):
        return PlcUnavailable("PLC_ERROR", f"{what}: the server answered {exc}")
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return PlcUnavailable("MODBUS_TIMEOUT", f"{what}: no answer in time")
    return PlcUnavailable("CONNECTION_REFUSED", f"{what}: {type(exc).__name__}: {exc}"[:300])
