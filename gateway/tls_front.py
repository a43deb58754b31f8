"""TLS in front of the gateway: ``LINECTL_TLS_CERT`` / ``LINECTL_TLS_KEY``
serve HTTPS and ``wss`` on ``LINECTL_HTTP_PORT``.

gunicorn then listens on a loopback port only, and this process (started
by ``python -m gateway``, ended with it) terminates TLS and passes each
connection's bytes on, first telling gunicorn the client's address in a
PROXY protocol v1 line (gunicorn trusts it from 127.0.0.1 only), so audit
rows keep the real source address. The websocket streams' hub keeps its
plain sockets: it sends with ``sendmsg`` and hands sockets over by ``dup``,
neither of which an SSL socket allows.

    python -m gateway.tls_front HOST PORT BACKEND_PORT CERT KEY
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import signal
import socket
import ssl
import subprocess
import sys

log = logging.getLogger("gateway.tls_front")
CHUNK = 64 * 1024
HANDSHAKE_SECONDS = 10.0
PR_SET_PDEATHSIG = 1


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, half_close: bool) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if half_close and writer.can_write_eof():
            writer.write_eof()  # the request is complete; the answer may still come
            return
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    writer.close()


def proxy_line(peer, local) -> bytes:
    family = "TCP6" if ":" in peer[0] else "TCP4"
    return f"PROXY {family} {peer[0]} {local[0]} {peer[1]} {local[1]}\r\n".encode()


def handler(backend_port: int):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", backend_port)
        except OSError:
            writer.close()
            return
        up_writer.write(proxy_line(writer.get_extra_info("peername"), writer.get_extra_info("sockname")))
        await asyncio.gather(_pipe(reader, up_writer, True), _pipe(up_reader, writer, False))
        up_writer.close()
        writer.close()

    return handle


async def serve(host: str, port: int, backend_port: int, context: ssl.SSLContext) -> None:
    server = await asyncio.start_server(handler(backend_port), host, port, ssl=context, reuse_address=True,
                                        ssl_handshake_timeout=HANDSHAKE_SECONDS, backlog=2048)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def _end_with_parent() -> None:
    # Linux: SIGTERM when the gateway's master goes, however it goes.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_front(settings, options: dict) -> subprocess.Popen | None:
    """Under TLS: point gunicorn's ``options`` at a loopback port with the PROXY
    protocol, and start the TLS front on the public address. None without TLS."""
    if not settings.tls:
        return None
    backend_port = _free_loopback_port()
    options.update(bind=f"127.0.0.1:{backend_port}", proxy_protocol="v1", proxy_allow_ips="127.0.0.1")
    return subprocess.Popen([sys.executable, "-m", "gateway.tls_front", settings.http_host,
                             str(settings.http_port), str(backend_port), str(settings.tls_cert),
                             str(settings.tls_key)])


def main(argv: list[str]) -> int:
    host, port, backend_port, cert, key = argv
    _end_with_parent()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(serve(host, int(port), int(backend_port), tls_context(cert, key)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
