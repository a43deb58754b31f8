"""Why no OPC UA session opens, said once in a sentence naming the setting to
check (deploy/OPCUA_MAP.md, "Security"), and no more than once a minute while
it lasts.

A wrong pinned server certificate shows no status of its own: the server
cannot decrypt what the client sent, and answers ``BadTcpInternalError``,
``BadSecurityChecksFailed``, or nothing at all. So when a secured session
fails that way with ``LINECTL_OPCUA_SERVER_CERT`` set, the certificate the
server's endpoint presents (read without security, as any client may) is
compared with the pinned one. asyncua's own records of the same failure are
echoes of the exception classified here: they are logged at DEBUG.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from asyncua import Client, ua
from asyncua.crypto import security_policies
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from services.hardware.device.port import PLC_IDENTITY_MISMATCH, PlcUnavailable
from services.hardware.opcua_certs import certificate_directory

REPEAT_EVERY = 60.0  # seconds between two lines of the same problem

USER_REFUSED = {ua.StatusCodes.BadUserAccessDenied, ua.StatusCodes.BadIdentityTokenInvalid,
                ua.StatusCodes.BadIdentityTokenRejected, ua.StatusCodes.BadUserSignatureInvalid}
CLIENT_CERT_REJECTED = {
    ua.StatusCodes.BadCertificateUntrusted, ua.StatusCodes.BadCertificateInvalid,
    ua.StatusCodes.BadCertificateUriInvalid, ua.StatusCodes.BadCertificateTimeInvalid,
    ua.StatusCodes.BadCertificateIssuerTimeInvalid, ua.StatusCodes.BadCertificateUseNotAllowed,
    ua.StatusCodes.BadCertificateRevoked, ua.StatusCodes.BadCertificateIssuerRevoked,
    ua.StatusCodes.BadCertificateRevocationUnknown, ua.StatusCodes.BadCertificateChainIncomplete,
    ua.StatusCodes.BadSecurityChecksFailed}
# What a server that cannot decrypt the client's messages answers (or a timeout: nothing).
UNREADABLE = {ua.StatusCodes.BadTcpInternalError, ua.StatusCodes.BadSecurityChecksFailed,
              ua.StatusCodes.BadDecodingError}


def status_code(exc: BaseException) -> int | None:
    """The OPC UA status of a failure (its cause's too), or None."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, ua.UaStatusCodeError):
            return exc.code
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def thumbprint(der: bytes) -> str:
    return hashlib.sha1(der).hexdigest()  # noqa: S324 - OPC UA names certificates by their SHA-1


def certificate_der(data: bytes) -> bytes:
    """A certificate file's content (PEM or DER) as DER."""
    if data.lstrip().startswith(b"-----BEGIN"):
        return x509.load_pem_x509_certificate(data).public_bytes(Encoding.DER)
    return data


async def presented_certificate(url: str, timeout: float) -> bytes | None:
    """The certificate the server's Basic256Sha256 SignAndEncrypt endpoint presents
    (its first, if a chain), read without security; None when it cannot be had."""
    client = Client(url, timeout=timeout)
    try:
        endpoints = await asyncio.wait_for(client.connect_and_get_server_endpoints(), timeout)
        endpoint = Client.find_endpoint(endpoints, ua.MessageSecurityMode.SignAndEncrypt,
                                        security_policies.SecurityPolicyBasic256Sha256.URI)
    except Exception:
        return None
    der = endpoint.ServerCertificate or b""
    return der[:int.from_bytes(der[2:4], "big") + 4] if len(der) > 4 else None


def client_certificate_file(options: dict[str, Any]) -> str:
    """Where this client's certificate is: given, or generated under the data directory."""
    return str(options.get("cert") or certificate_directory(options) / "linectl-hardware.der")


def explain(exc: BaseException, url: str, credentials: dict[str, Any] | None,
            presented: bytes | None = None, cert_file: str = "LINECTL_OPCUA_CERT") -> tuple[int, str]:
    """(log level, sentence) for a session that did not open: ERROR for a setting
    to change, WARNING for a PLC away. ``presented``: the server's certificate as
    its endpoint shows it (looked at only with a pinned one)."""
    code = status_code(exc)
    name = ua.StatusCode(code).name if code is not None else type(exc).__name__
    if credentials is not None:
        pinned = credentials.get("server_cert")
        if pinned and presented and presented != certificate_der(pinned[0]):
            return logging.ERROR, (
                f"the OPC UA server at {url} presents another certificate (SHA-1 {thumbprint(presented)}) than "
                f"the one LINECTL_OPCUA_SERVER_CERT pins (SHA-1 {thumbprint(certificate_der(pinned[0]))}): "
                f"check LINECTL_OPCUA_SERVER_CERT ({name})")
        if code in USER_REFUSED:
            return logging.ERROR, (f"the OPC UA server at {url} refused the user {credentials['user']!r} ({name}): "
                                   "check LINECTL_OPCUA_USER and LINECTL_OPCUA_PASSWORD")
        if code in CLIENT_CERT_REJECTED:
            return logging.ERROR, (
                f"the OPC UA server at {url} rejected this client's certificate ({name}): add {cert_file} to "
                "the PLC's trusted certificates, or check LINECTL_OPCUA_CERT and LINECTL_OPCUA_KEY")
    if isinstance(exc, ua.UaError) and "No matching endpoints" in str(exc):
        wanted = "Basic256Sha256 SignAndEncrypt" if credentials is not None else "unsecured"
        return logging.ERROR, (f"the OPC UA server at {url} offers no {wanted} endpoint: check "
                               "LINECTL_OPCUA_SECURITY and the PLC's security settings")
    if isinstance(exc, PlcUnavailable) and exc.code == PLC_IDENTITY_MISMATCH:
        return logging.ERROR, exc.message[:300]  # names the line, the address, what was expected and found
    if isinstance(exc, PlcUnavailable):
        return logging.ERROR, f"no OPC UA session with {url}: {exc.message}"[:300]
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else name
    return logging.WARNING, f"no OPC UA session with {url} (check LINECTL_PLC and that the PLC runs): {detail}"[:300]


async def why_no_session(exc: BaseException, url: str, timeout: float, credentials: dict[str, Any] | None,
                         options: dict[str, Any]) -> tuple[int, str]:
    """(log level, sentence) for a session that did not open; with a pinned server
    certificate and a failure that says nothing clearer, the presented one is
    compared with it first."""
    presented = await presented_certificate(url, timeout) if worth_a_look(exc, credentials) else None
    return explain(exc, url, credentials, presented, client_certificate_file(options))


def worth_a_look(exc: BaseException, credentials: dict[str, Any] | None) -> bool:
    """Whether the server's presented certificate may explain ``exc``: a secured
    session, a pinned certificate, and a failure that says nothing clearer."""
    if credentials is None or not credentials.get("server_cert"):
        return False
    code = status_code(exc)
    if isinstance(exc, ConnectionRefusedError):  # nothing listens: no certificate to look at
        return False
    return code in UNREADABLE or (code is None and isinstance(exc, TimeoutError | asyncio.TimeoutError | EOFError
                                                                 | ConnectionError | ua.UaError))


class ProblemLog:
    """Says why no session opens: the first time, a new reason at once, the same
    one again after ``every`` seconds at most. ``say(level, message, *args)``."""

    def __init__(self, say: Callable[..., None], clock: Callable[[], float] = time.monotonic,
                 every: float = REPEAT_EVERY):
        self.say, self.clock, self.every = say, clock, every
        self.failures = 0  # sessions that did not open
        self._last: tuple[str, float] | None = None

    def failed(self, level: int, sentence: str) -> None:
        now = self.clock()
        if self._last is None or self._last[0] != sentence or now - self._last[1] >= self.every:
            self._last = (sentence, now)
            self.say(level, "%s", sentence)
        self.failures += 1  # after the line is handed on: a reader of the count finds it said

    def opened(self) -> None:
        self._last = None


class _AsyncuaEcho(logging.Filter):
    """asyncua's records of a failed request that the driver raises and reports
    itself: at DEBUG (a handler at INFO or above drops them)."""

    ECHOES = {"Received an error: %r", "Received an error: %s", "Got error status from server: %s",
              "ServiceFault (%s, diagnostics: %s) from server received %s",
              "create_session fault response: %s (%s)"}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in self.ECHOES and record.levelno > logging.DEBUG:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


ECHOING_LOGGERS = ("asyncua.client.ua_client.UASocketProtocol", "asyncua.uaprotocol", "asyncua.client.client")


def quiet_asyncua_echoes() -> None:
    """Once per process: asyncua's echoes of what the driver reports at DEBUG."""
    for name in ECHOING_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _AsyncuaEcho) for f in logger.filters):
            logger.addFilter(_AsyncuaEcho())


def quiet_asyncua() -> None:
    """asyncua logs every request and publish at INFO: warnings and worse are news
    (once: a level set later, to look into something, stays); its echoes of what
    the driver reports itself are DEBUG (:func:`quiet_asyncua_echoes`)."""
    global _asyncua_quieted
    if _asyncua_quieted:
        return
    _asyncua_quieted = True
    asyncua_log = logging.getLogger("asyncua")
    if asyncua_log.level < logging.WARNING:
        asyncua_log.setLevel(logging.WARNING)
    quiet_asyncua_echoes()


_asyncua_quieted = False
