"""What only the OPC UA driver has: a secured session, a session lost and back
with nothing lost, its hand-over between asyncua's OS thread and the green
threads under load, and the layout's NodeIds (deploy/OPCUA_MAP.md)."""

from __future__ import annotations

import asyncio
import time

import eventlet
import pytest

from services.hardware import opcua_map as M
from services.hardware import plc as P
from services.hardware.action_requests import ActionRequest, CommandBuilder
from services.hardware.device import opcua as opcua_driver
from services.hardware.device.opcua import OpcUaPort
from services.hardware.robot import ActionRunner
from services.hardware.service import HardwareService
from services.hardware.sim.opcua_server import OpcUaLineSimulator
from services.hardware.watcher import SignalWatcher
from shared import events as ev
from shared.layout import LayoutError, parse_layout
from tests.hardware.conftest import call, outcome
from tests.support.ports import free_port
from tests.support.waiting import wait_for

_socket = eventlet.patcher.original("socket")
_threading = eventlet.patcher.original("threading")
_time = eventlet.patcher.original("time")

USER, PASSWORD = "cell-operator", "s3cret-pass-0001"


@pytest.fixture
def protocol():
    return "opcua"


@pytest.fixture(scope="module")
def secured_dir(tmp_path_factory):
    # one certificate pair for the module: RSA key generation is the slow part
    return tmp_path_factory.mktemp("opcua-secured")


@pytest.fixture
def secured_sim(layout, sim_options, secured_dir):
    simulator = OpcUaLineSimulator(layout, sim_options, "127.0.0.1", free_port(), security="sign-and-encrypt",
                                   user=USER, password=PASSWORD, cert_dir=secured_dir / "sim").start()
    yield simulator
    simulator.stop()


def _secured_config(nameko_config, sim, data_dir, password=PASSWORD):
    return {**nameko_config, "LINECTL_PLC_ADDRESS": sim.address, "LINECTL_HW_ACTION_TIMEOUT": 15.0,
            "LINECTL_HW_MODBUS_TIMEOUT": 5.0, "LINECTL_OPCUA_SECURITY": "sign-and-encrypt",
            "LINECTL_OPCUA_USER": USER, "LINECTL_OPCUA_PASSWORD": password,
            "LINECTL_DATA_DIR": str(data_dir)}


def test_a_secured_session_basic256sha256_sign_and_encrypt_runs_actions(container_factory, nameko_config,
                                                                        received, secured_sim, secured_dir):
    container = container_factory(HardwareService, _secured_config(nameko_config, secured_sim, secured_dir))
    container.start()
    received.wait(ev.PLC_CONNECTION, connected=True)
    assert outcome(container, received, "dock_to_buffer", "s1", 1, job_id=7)[0] == ev.ROBOT_ACTION_SUCCEEDED
    event_type, payload = outcome(container, received, "scan", "s2", 1, job_id=7)
    label = secured_sim.model.label_prefix + "00000007"
    assert (event_type, payload["data"]["code"]) == (ev.TOOL_ACTION_SUCCEEDED, label)
    # the client certificate was generated once into the data directory, and is reused
    assert (secured_dir / "opcua" / "linectl-hardware.der").is_file()
    key = secured_dir / "opcua" / "linectl-hardware.key.pem"
    assert key.stat().st_mode & 0o077 == 0
    port = OpcUaPort(secured_sim.address, secured_sim.layout, timeout=5.0,
                     options={"security": "sign-and-encrypt", "user": USER, "password": PASSWORD,
                              "data_dir": secured_dir})
    try:
        assert port.read_state()["buffer"][0]["occupied"] is True
        assert port.security == "sign-and-encrypt"
        assert port._client.security_policy.URI.endswith("#Basic256Sha256")
    finally:
        port.close()


def test_a_wrong_password_or_no_security_never_gets_a_session(layout, secured_sim, secured_dir):
    # A long request timeout: the first read waits up to three of them (30 s) for a
    # session that may still open, but a server that said no has answered.
    wrong = OpcUaPort(secured_sim.address, layout, timeout=10.0,
                      options={"security": "sign-and-encrypt", "user": USER, "password": "wrong-password-000",
                               "data_dir": secured_dir})
    plain = OpcUaPort(secured_sim.address, layout, timeout=10.0)  # security None: the server offers none
    def refused(port):
        with pytest.raises(P.PlcUnavailable) as raised:
            port.read_state()
        return raised.value.code

    try:
        started = time.monotonic()
        attempts = [eventlet.spawn(refused, port) for port in (wrong, plain)]
        assert [attempt.wait() for attempt in attempts] == ["CONNECTION_REFUSED"] * 2
        assert time.monotonic() - started < 10.0  # the refusals, not the start-up bound
        assert wrong.sessions == plain.sessions == 0
    finally:
        wrong.close()
        plain.close()


def test_bad_security_settings_are_clear_errors(layout):
    with pytest.raises(ValueError, match="LINECTL_OPCUA_USER"):
        OpcUaPort("opc.tcp://127.0.0.1:4840", layout, options={"security": "sign-and-encrypt"})
    with pytest.raises(ValueError, match="security"):
        OpcUaPort("opc.tcp://127.0.0.1:4840", layout, options={"security": "basic128"})
    with pytest.raises(ValueError, match="opc.tcp://host:port"):
        OpcUaPort("opc.tcp://nohostport", layout)


def test_a_session_lost_mid_cycle_comes_back_by_itself_and_nothing_is_lost(layout, sim, control):
    """The cycle ends while the server is away: the done edge arrives after the
    reconnect, once; the connection edges say what happened."""
    # a request timeout a loaded machine does not reach: only the drop below loses the session
    port = OpcUaPort(sim.address, layout, timeout=15.0)
    watcher = SignalWatcher(port, layout)
    runner = ActionRunner(port, layout, action_timeout=20.0)
    build = CommandBuilder(layout)
    signals = []
    try:
        signals += watcher.watch(2.0)
        assert runner.run(ActionRequest("d", 1, build.dock_to_buffer(1, 51))).ok
        assert runner.run(ActionRequest("l", 2, build.buffer_to_equipment(1, "MC1", 1, 51))).ok
        control.machine_hang("MC1")
        assert runner.run(ActionRequest("s", 3, build.start_machine("MC1", {"1": 51}))).ok
        sessions = port.sessions
        asyncio.run_coroutine_threadsafe(sim._drop(0.6), sim._loop).result(5)
        sim.clear()  # the hung cycle ends now, while the server is away
        # a reconnect attempt made while the server comes back may wait out one request
        # timeout (15 s) before the next one gets the session: wait longer than that
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not any(t == ev.MACHINE_DONE for t, _ in signals):
            signals += watcher.watch(0.5)
        connection = [p["connected"] for t, p in signals if t == ev.PLC_CONNECTION]
        assert connection == [True, False, True], signals
        done = [p for t, p in signals if t == ev.MACHINE_DONE]
        assert done == [{"machineId": "MC1", "slotNo": 1, "jobId": 51}]
        assert port.sessions == sessions + 1  # it subscribed again by itself
        signals += watcher.watch(0.3)
        assert len([t for t, _ in signals if t == ev.MACHINE_DONE]) == 1  # once
        assert port.read_state()["equipment"][0]["slots"][0]["done"] is True
    finally:
        port.close()


def test_an_action_sees_its_answer_as_it_is_notified_not_at_its_next_poll(layout, sim):
    """The handshake waits on the subscription: with a 60 s poll interval an action
    the simulator ends in 30 ms ends in a fraction of a second (polling, it would
    take the 60 s at least once; the bound leaves a loaded machine room)."""
    port = OpcUaPort(sim.address, layout, timeout=15.0)
    runner = ActionRunner(port, layout, action_timeout=90.0, poll_interval=60.0)
    build = CommandBuilder(layout)
    try:
        port.read_state()
        for n, request in enumerate([build.dock_to_buffer(1, 61), build.buffer_to_equipment(1, "MC2", 1, 61),
                                     build.start_machine("MC2", {"1": 61})], start=1):
            started = time.monotonic()
            result = runner.run(ActionRequest(f"n{n}", n, request))
            assert result.ok, result
            assert time.monotonic() - started < 20.0
    finally:
        port.close()


def test_an_action_waiting_for_the_link_reconnects_at_once_not_after_the_back_off(layout, sim, monkeypatch):
    """A PLC back from a drop is reached as soon as an action waits for it (as a Modbus
    request reconnects), not after the session's back-off: here a minute, so only the
    action's asking can bring the session back within the test (in CI the back-off
    outlasted an action's 5 s grace under load, and a 2 s drop made it NOT_SENT)."""
    monkeypatch.setattr(opcua_driver, "BACKOFF_FIRST", 60.0)
    monkeypatch.setattr(opcua_driver, "BACKOFF_MAX", 60.0)
    port = OpcUaPort(sim.address, layout, timeout=5.0)
    try:
        port.read_state()
        sessions = port.sessions
        asyncio.run_coroutine_threadsafe(sim._drop(0.3), sim._loop).result(5)
        wait_for(lambda: not port._copy.connected, 5, message="the session lost")

        def back():
            port.wait_for_link(0.2)  # what an action in flight does (services/hardware/robot.py)
            return port._copy.connected
        wait_for(back, 10, message="the session back while an action waits for it")
        assert port.sessions == sessions + 1
        assert port.read_state()["connected"] is True
    finally:
        port.close()


def test_hundreds_of_hand_overs_from_many_green_threads_none_lost(layout, sim):
    """Every call handed to asyncua's thread comes back to the green thread that
    made it, from 40 green threads at once (no lost wake-up: a lost one would wait
    out its 30 s timeout and raise), and promptly (a loaded CI machine once took
    3.7 s for one: the bound is for a stall, not for speed)."""
    port = OpcUaPort(sim.address, layout, timeout=30.0)
    try:
        port.read_state()
        answers: list[float] = []

        def caller(n):
            for i in range(25):
                t0 = time.monotonic()
                assert port._run(lambda i=i: _echo(n * 1000 + i), "echo") == n * 1000 + i
                answers.append(time.monotonic() - t0)

        threads = [eventlet.spawn(caller, n) for n in range(40)]
        started = time.monotonic()
        for t in threads:
            t.wait()
        assert len(answers) == 1000
        assert max(answers) < 10.0, max(answers)
        assert time.monotonic() - started < 60
    finally:
        port.close()


async def _echo(value):
    await asyncio.sleep(0)
    return value


def test_hundreds_of_actions_and_signals_under_the_patched_service_never_stall(make_hardware, received, sim):
    """The whole service (monkey-patched, nameko) over OPC UA: 200 machine
    handshakes on four machines at once beside 60 robot actions, while the
    simulator's dock raises a signal every few milliseconds; every action gets
    its one result and the watcher keeps up."""
    hardware = make_hardware()

    accepted = []
    for n in range(50):
        for machine in ("MC1", "MC2", "WASH1", "INSP1"):
            answer = call(hardware, "start_machine", f"m{machine}{n}", machine)  # nothing loaded: error 7
            assert answer["accepted"], answer
            accepted.append(answer["actionId"])
    for n in range(60):
        answer = call(hardware, "scan", f"r{n}", 1)  # nothing on slot 1: SOURCE_EMPTY, a full handshake
        accepted.append(answer["actionId"])
    arrivals = sim.model.map.dock_base + P.D_ARRIVAL_SEQ
    for _ in range(100):  # a pallet arrival signal every ~10 ms meanwhile
        sim.model.mem[arrivals] = (sim.model.mem[arrivals] + 1) & 0xFFFF
        eventlet.sleep(0.01)
    results = [received.result(action_id, timeout=60) for action_id in accepted]
    assert len(results) == 260
    starts = [p for t, p in results if t == ev.MACHINE_START_FAILED]
    assert len(starts) == 200 and {p["errorCode"] for p in starts} == {"PLC_ERROR"}
    scans = [p for t, p in results if t == ev.TOOL_ACTION_FAILED]
    assert len(scans) == 60 and {p["errorCode"] for p in scans} == {"SOURCE_EMPTY"}
    # the watcher saw the arrivals (some may fall into one picture) and the final count
    wait_for(lambda: len(received.of(ev.PALLET_ARRIVED)) >= 20, 20, message="pallet signals")
    assert call(hardware, "plc_state")["dock"]["arrivals"] == sim.model.mem[arrivals]


def test_the_layout_may_name_other_node_ids_and_they_are_checked(layout, sim):
    raw = dict(layout.raw)
    raw["opcua"] = {"Robot": {"AckId": "ns=2;s=Robot.AckId", "Execute": f"nsu={M.NAMESPACE_URI};s=Robot.Execute"},
                    "MC1": {"Slot1.Done": "ns=2;s=MC1.Slot1.Done"}}
    mapped = parse_layout(raw)
    ids = M.node_ids(mapped)
    assert ids["Robot.AckId"] == "ns=2;s=Robot.AckId" and ids["Robot.DoneId"] == M.default_node_id("Robot.DoneId")
    port = OpcUaPort(sim.address, mapped, timeout=3.0)
    try:
        runner = ActionRunner(port, mapped, action_timeout=10.0)
        assert runner.run(ActionRequest("d", 1, CommandBuilder(mapped).dock_to_buffer(2, 3))).ok
    finally:
        port.close()
    for bad, message in (({"Robot": {"AckId": "DB10.AckId"}}, "expected a NodeId"),
                         ({"Crane": {"AckId": "i=5"}}, "unknown device"),
                         ({"MC1": {"Slot1 Done": "i=5"}}, "not a signal or method name")):
        with pytest.raises(LayoutError, match=message):
            parse_layout({**layout.raw, "opcua": bad})
    with pytest.raises(LayoutError, match="no such signal"):
        M.node_ids(parse_layout({**layout.raw, "opcua": {"MC1": {"Slot9.Done": "i=5"}}}))


def test_the_simulator_serves_the_documented_tree(layout, sim):
    """Browse names, values and types as deploy/OPCUA_MAP.md lists them (asyncua's
    own client calls, on the driver's loop)."""
    from asyncua import ua

    port = OpcUaPort(sim.address, layout, timeout=5.0)

    async def browse(client):
        idx = await client.get_namespace_index(M.NAMESPACE_URI)
        objects = {(await n.read_browse_name()).Name for n in await client.nodes.objects.get_children()}
        mc1 = client.get_node(ua.NodeId("MC1", idx))
        names = {(await n.read_browse_name()).Name for n in await mc1.get_children()}
        state = await client.get_node(ua.NodeId("MC1.MachineryItemState", idx)).read_value()
        program = await client.get_node(ua.NodeId("MC1.Slot1.ProductionProgramState", idx)).read_value()
        verdict_node = client.get_node(ua.NodeId("INSP1.Slot1.ResultEvaluation", idx))
        verdict = await verdict_node.read_data_type_as_variant_type()
        return objects, names, state, program, verdict

    try:
        port.read_state()
        objects, names, state, program, verdict = port._run(lambda: browse(port._client), "browse", 10.0)
    finally:
        port.close()
    assert {"Robot", "Dock", "Buffer", "MC1", "MC2", "WASH1", "INSP1", "SimControl"} <= objects
    assert {"AckId", "ErrorCode", "AbortAckId", "Running", "Fault", "MachineryItemState", "Slot1", "Slot2",
            "Start", "Abort"} <= names
    assert (state, program) == ("NotExecuting", "Initializing")
    assert verdict == ua.VariantType.Int32


class SlowToOpenProxy:
    """TCP in front of the simulator that holds each connection's first ``held``
    client messages for ``delay`` seconds: a server slow to open a session (a
    secured handshake on a busy host), prompt once it is open. Plain OS threads
    and sockets, outside eventlet's hub, as a remote server is: nothing of it
    can be left registered with the hub of the tests that follow."""

    def __init__(self, target_port: int, delay: float, held: int):
        self.delay, self.held, self.target = delay, held, target_port
        self.server = _socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sockets = [self.server]
        _threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
                upstream = _socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                return
            self.sockets += [client, upstream]
            _threading.Thread(target=self._pipe, args=(client, upstream, self.held), daemon=True).start()
            _threading.Thread(target=self._pipe, args=(upstream, client, 0), daemon=True).start()

    def _pipe(self, src, dst, held):
        try:
            while data := src.recv(65536):
                if held:
                    held -= 1
                    _time.sleep(self.delay)  # the slow server: what the test is about
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            _shut(s)

    def close(self):
        for s in self.sockets:
            _shut(s)


def _shut(sock):
    try:
        sock.shutdown(_socket.SHUT_RDWR)  # wakes a thread blocked in accept() or recv() on it
    except OSError:
        pass
    sock.close()


def test_a_first_session_slower_to_open_than_one_request_timeout_is_waited_for(sim, layout):
    timeout = 3.0  # each held message answers well within it; the session as a whole does not
    proxy = SlowToOpenProxy(int(sim.address.rsplit(":", 1)[1]), delay=1.6, held=2)
    port = OpcUaPort(f"opc.tcp://127.0.0.1:{proxy.port}", layout, timeout=timeout)
    try:
        t0 = time.monotonic()
        state = port.read_state()  # the service's first look at the PLC, as it starts
        assert time.monotonic() - t0 > timeout  # the premise: longer than one request timeout
        assert len(state["buffer"]) == layout.buffer_slots
    finally:
        port.close()
        proxy.close()
