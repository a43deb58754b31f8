"""A secured OPC UA session that does not open says why in one log line naming
the setting to check, at most once a minute, and /readyz says it too
(deploy/OPCUA_MAP.md, "Security"): a pinned server certificate that is not the
server's, a client certificate the server does not trust, a refused user."""

from __future__ import annotations

import logging

import eventlet
import eventlet.event
import pytest
from asyncua import ua

from gateway.api.health import plc_down
from services.hardware.device import asyncio_bridge
from services.hardware.device.opcua import OpcUaPort
from services.hardware.device.opcua_errors import (
    ProblemLog,
    explain,
    quiet_asyncua_echoes,
    thumbprint,
    worth_a_look,
)
from services.hardware.device.opcua_session import CLIENT_APP_URI
from services.hardware.opcua_certs import ensure_certificate
from services.hardware.service import HardwareService
from services.hardware.sim.model import SimOptions
from services.hardware.sim.opcua_server import OpcUaLineSimulator
from shared import events as ev
from tests.hardware.conftest import call
from tests.support.ports import free_port
from tests.support.waiting import wait_for

USER, PASSWORD = "cell-operator", "s3cret-pass-0001"
ASYNCUA_CLIENT = ("asyncua.client", "asyncua.uaprotocol")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """Data directories with a client certificate the server trusts and one it
    does not, and a file with a server certificate that is not the server's."""
    root = tmp_path_factory.mktemp("opcua-problems")
    trusted, _ = ensure_certificate(root / "trusted" / "opcua", "linectl-hardware", CLIENT_APP_URI, server=False)
    ensure_certificate(root / "untrusted" / "opcua", "linectl-hardware", CLIENT_APP_URI, server=False)
    other, _ = ensure_certificate(root / "other", "other-plc", "urn:other:plc", server=True)
    (root / "other-plc.der").write_bytes(other)
    return root, trusted


@pytest.fixture(scope="module")
def plc(layout, certs):
    root, trusted = certs
    simulator = OpcUaLineSimulator(layout, SimOptions(speed=200.0), "127.0.0.1", free_port(),
                                   security="sign-and-encrypt", user=USER, password=PASSWORD,
                                   cert_dir=root / "sim", trusted_clients=[trusted]).start()
    yield simulator
    simulator.stop()


def _flushed(port) -> None:
    """Every log record handed to the hub so far has been handled."""
    for waker in (port._bridge.waker, asyncio_bridge._log_waker):
        done = eventlet.event.Event()
        waker.post(lambda done=done: done.send(True))
        done.wait(5.0)


CASES = {
    "server certificate": (lambda root: {"data_dir": str(root / "trusted"),
                                         "server_cert": str(root / "other-plc.der")},
                           "check LINECTL_OPCUA_SERVER_CERT"),
    "client certificate": (lambda root: {"data_dir": str(root / "untrusted")},
                           "rejected this client's certificate"),
    "user": (lambda root: {"data_dir": str(root / "trusted"), "password": "wrong-password-000"},
             "check LINECTL_OPCUA_USER and LINECTL_OPCUA_PASSWORD"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_session_refused_says_why_in_one_line_a_minute(case, layout, plc, certs, caplog):
    root, _ = certs
    options, says = CASES[case]
    clock = Clock()
    # a refusal answers at once; the request timeout only bounds a loaded machine's
    # slow answer, which would be said as a timeout instead (a different line)
    port = OpcUaPort(plc.address, layout, timeout=2.0, clock=clock,
                     options={"security": "sign-and-encrypt", "user": USER, "password": PASSWORD,
                              **options(root)})

    def lines():
        return [r for r in caplog.records if says in r.getMessage()]

    def said_again() -> bool:
        _flushed(port)
        return len(lines()) >= 2

    try:
        wait_for(lambda: port.problems.failures >= 2, 20, message="two sessions refused")
        _flushed(port)
        assert len(lines()) == 1, [r.getMessage() for r in lines()]
        assert lines()[0].levelno == logging.ERROR
        if case == "client certificate":
            assert str(root / "untrusted" / "opcua" / "linectl-hardware.der") in lines()[0].getMessage()
        # asyncua's own records of the same failure are at DEBUG, not beside it
        noise = [r for r in caplog.records if r.name.startswith(ASYNCUA_CLIENT) and r.levelno >= logging.WARNING]
        assert noise == [], [r.getMessage() for r in noise]
        with pytest.raises(Exception, match=says):  # what an action or the watcher is told
            port.read_state()
        clock.now += 61.0  # a minute on: said again, once
        wait_for(said_again, 20, message="the refusal said again")
        _flushed(port)
        assert len(lines()) == 2  # and only once in the new minute
    finally:
        port.close()
    assert port.sessions == 0


def test_readyz_names_the_plc_link_and_why(container_factory, nameko_config, received, plc, certs):
    root, _ = certs
    container = container_factory(HardwareService, {
        **nameko_config, "LINECTL_PLC_ADDRESS": plc.address, "LINECTL_HW_MODBUS_TIMEOUT": 0.5,
        "LINECTL_OPCUA_SECURITY": "sign-and-encrypt", "LINECTL_OPCUA_USER": USER,
        "LINECTL_OPCUA_PASSWORD": "wrong-password-000", "LINECTL_DATA_DIR": str(root / "trusted")})
    container.start()
    received.wait(ev.PLC_CONNECTION, connected=False)
    # the watcher's next look tells the reason (the first may come before the first refusal)
    status = wait_for(lambda: (s := call(container, "status"))["plcError"] and "LINECTL_OPCUA_PASSWORD"
                      in s["plcError"] and s, 10, message="status() naming the refused user")
    assert status["plcConnected"] is False
    assert plc_down(status) == f"plc at {plc.address} ({status['plcError']})"
    assert f"refused the user '{USER}'" in status["plcError"]


def test_a_server_that_cannot_decrypt_is_checked_against_the_pinned_certificate(certs):
    """node-opcua answers a client that encrypted to another certificate with
    BadTcpInternalError ("oaep decoding error"): not a word of the certificate."""
    root, trusted = certs
    pinned = (root / "other-plc.der").read_bytes()
    credentials = {"server_cert": (pinned, "der"), "user": USER}
    failure = ua.UaStatusCodeError(ua.StatusCodes.BadTcpInternalError)
    assert worth_a_look(failure, credentials)
    level, sentence = explain(failure, "opc.tcp://plc:4840", credentials, presented=trusted)
    assert level == logging.ERROR
    assert f"SHA-1 {thumbprint(pinned)}" in sentence and f"SHA-1 {thumbprint(trusted)}" in sentence
    assert sentence.endswith("check LINECTL_OPCUA_SERVER_CERT (BadTcpInternalError)")
    # the pinned one presented: the failure is something else
    assert "LINECTL_OPCUA_SERVER_CERT" not in explain(failure, "opc.tcp://plc:4840", credentials, pinned)[1]


def test_a_server_without_the_endpoint_asked_for_is_a_setting_to_change():
    """An unsecured client at a server that offers only secured endpoints (and the
    other way round) is told which setting to check, as an error: the server
    answered, and no wait or retry changes that."""
    failure = ua.UaError("No matching endpoints: 1, http://opcfoundation.org/UA/SecurityPolicy#None")
    level, sentence = explain(failure, "opc.tcp://plc:4840", None)
    assert level == logging.ERROR
    assert "offers no unsecured endpoint: check LINECTL_OPCUA_SECURITY" in sentence
    level, sentence = explain(failure, "opc.tcp://plc:4840", {"user": USER})
    assert level == logging.ERROR and "offers no Basic256Sha256 SignAndEncrypt endpoint" in sentence


def test_a_new_reason_is_said_at_once_the_same_one_a_minute_later(caplog):
    said, clock = [], Clock()
    problems = ProblemLog(lambda level, message, *args: said.append(message % args), clock)
    for reason in ("a", "a", "b", "b", "a"):
        problems.failed(logging.ERROR, reason)
    assert said == ["a", "b", "a"]
    clock.now += 59.0
    problems.failed(logging.ERROR, "a")
    clock.now += 1.0
    problems.failed(logging.ERROR, "a")
    problems.opened()
    problems.failed(logging.ERROR, "a")  # a session opened in between: news again
    assert said == ["a", "b", "a", "a", "a"]


def test_asyncuas_echo_of_a_refused_request_is_debug(caplog):
    quiet_asyncua_echoes()
    logging.getLogger("asyncua.client.ua_client.UASocketProtocol").critical(
        "Received an error: %r", "ErrorMessage(Error=BadTcpInternalError, Reason='oaep decoding error')")
    logging.getLogger("asyncua.client.ua_client.UASocketProtocol").warning("Future for request id %s", 3)
    assert [(r.levelno, r.msg) for r in caplog.records] == [
        (logging.DEBUG, "Received an error: %r"), (logging.WARNING, "Future for request id %s")]
