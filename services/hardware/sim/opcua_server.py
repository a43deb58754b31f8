"""The simulator's OPC UA server: asyncua's ``Server`` over the same
:class:`LineModel` the Modbus server serves (same timings, same fault
injection), as the object tree of deploy/OPCUA_MAP.md.

The model keeps its registers; this server is a view of them. A tick (every
``TICK`` seconds) advances the model's time and writes every variable whose
value changed, so subscribers get a data-change notification for each edge;
a Read of the cell's variables does the same first, so it sees the model's
time now, as a Modbus read does. Methods (``Robot.Execute``, ``<machine>.Start``
/ ``Abort``, ``SimControl.*``) write into the model exactly as a Modbus host's
writes would, then answer at once with ``Accepted``.

The lifecycle, the server-side injections (late answers, drops, restarts)
and the model are the core's (services/hardware/sim/core.py); this is the OPC UA
part: the tree, the tick, the methods, listening and closing connections
(what asyncua has no setting for is services/hardware/sim/asyncua_server.py).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from pathlib import Path

from asyncua import Server, ua
from asyncua.common.callback import CallbackType
from asyncua.common.utils import ServiceError
from asyncua.server.binary_server_asyncio import BinaryServer
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from services.hardware import opcua_map as M
from services.hardware import plc as P
from services.hardware.opcua_certs import ensure_certificate
from services.hardware.sim.asyncua_server import (
    STANDARD_ADDRESS_SPACE,
    PasswordUsers,
    method_argument,
    publish_no_faster,
    stop_now,
)
from services.hardware.sim.core import SimulatorCore
from services.hardware.sim.model import SimOptions
from shared.layout import Layout

log = logging.getLogger(__name__)
TICK = 0.005  # seconds between two looks at the model (its time advances only then)


class OpcUaLineSimulator(SimulatorCore):
    """The line simulator served over OPC UA (``opc.tcp://host:port``).

    ``security``: ``"none"`` (the loopback default) or ``"sign-and-encrypt"``
    (Basic256Sha256 only, user name + password required; the server
    certificate is generated once into ``cert_dir``).

    ``trusted_clients``: the client certificates (DER) a secured server trusts, as
    a PLC's trust list; None trusts any (the simulator's default).

    ``publishing_interval`` (ms): the fastest publishing interval a subscription
    is granted, as a PLC whose server publishes slowly (node-opcua raises a 10 ms
    request to 50 ms); None grants what the client asks."""

    protocol = "opcua"
    start_timeout = 30.0  # asyncua's address space takes a while to build

    def __init__(self, layout: Layout, options: SimOptions, host: str = "127.0.0.1", port: int = 4840,
                 clock: Callable[[], float] = time.monotonic, security: str = "none",
                 user: str | None = None, password: str | None = None, cert_dir: Path | None = None,
                 publishing_interval: float | None = None, trusted_clients: list[bytes] | None = None):
        if publishing_interval is not None and not publishing_interval > 0:
            raise ValueError(f"publishing_interval: expected milliseconds > 0, got {publishing_interval!r}")
        if security not in ("none", "sign-and-encrypt"):
            raise ValueError(f"security: expected 'none' or 'sign-and-encrypt', got {security!r}")
        if security != "none" and not (user and password and cert_dir):
            raise ValueError("sign-and-encrypt needs a user name, a password and a certificate directory")
        super().__init__(layout, options, host, port, clock)
        self.security, self.user, self.password, self.cert_dir = security, user, password, cert_dir
        self.publishing_interval = publishing_interval
        self.trusted_clients = None if trusted_clients is None else set(trusted_clients)
        self._server: Server | None = None
        self._idx = 0
        self._published: dict[str, object] = {}
        self._signals = M.signals(layout)
        self._program_state: dict[str, str] = {}
        self.server_certificate: bytes | None = None  # DER, once started secured

    @property
    def address(self) -> str:
        return f"opc.tcp://{self.host}:{self.port}"

    def describe(self) -> str:
        return f"{super().describe()}, security {self.security}"

    # -- the tree --------------------------------------------------------------

    def _node(self, key: str) -> ua.NodeId:
        return ua.NodeId(key, self._idx)

    async def _build(self, server: Server) -> None:
        idx = self._idx = await server.register_namespace(M.NAMESPACE_URI)
        objects = server.nodes.objects
        parents = {}
        for device in [*M.devices(self.layout), M.SIM_CONTROL]:
            parents[device] = await objects.add_object(self._node(device), ua.QualifiedName(device, idx))
        values = self._values()
        for s in self._signals:
            parent = parents[s.device]
            for depth in range(1, len(s.path)):  # slot objects
                key = ".".join((s.device, *s.path[:depth]))
                if key not in parents:
                    parents[key] = await parent.add_object(self._node(key), ua.QualifiedName(s.path[depth - 1], idx))
                parent = parents[key]
            await parent.add_variable(self._node(s.key), ua.QualifiedName(s.path[-1], idx), values[s.key],
                                      getattr(ua.VariantType, s.type))
            self._published[s.key] = values[s.key]
        for m in M.methods(self.layout):
            handler = {"Execute": self._execute, "Start": self._start, "Abort": self._abort}[m.name]
            await parents[m.device].add_method(self._node(m.key), ua.QualifiedName(m.name, idx),
                                               self._method(handler, m.device),
                                               [method_argument(n, t) for n, t in m.inputs],
                                               [method_argument(n, t) for n, t in m.outputs])
        for name, inputs in M.SIM_CONTROL_METHODS:
            await parents[M.SIM_CONTROL].add_method(
                self._node(f"{M.SIM_CONTROL}.{name}"), ua.QualifiedName(name, idx),
                self._method(getattr(self, f"_control_{name}"), M.SIM_CONTROL),
                [method_argument(n, t) for n, t in inputs], [])

    def _values(self) -> dict[str, object]:
        """Every variable's value from the model's registers."""
        mem, m = self.model.mem, self.model.map
        r = m.robot_base
        v: dict[str, object] = {
            M.IDENTITY: self.model.identity,
            "Robot.Fault": mem[r + P.R_FAULT], "Robot.AckId": mem[r + P.R_ACK_ID],
            "Robot.State": mem[r + P.R_STATE], "Robot.DoneId": mem[r + P.R_DONE_ID],
            "Robot.ErrorCode": mem[r + P.R_ERROR_CODE],
            "Robot.ScanText": P.decode_text(mem[r + P.R_TEXT_OUT:r + P.R_TEXT_OUT + P.TEXT_REGISTERS]),
            "Dock.Pieces": mem[m.dock_base + P.D_PIECES], "Dock.Arrivals": mem[m.dock_base + P.D_ARRIVAL_SEQ],
        }
        for i in range(self.layout.buffer_slots):
            v[f"Buffer.{M.slot_name(i + 1)}"] = bool(mem[m.buffer_base + i])
        for e in m.equipment:
            b = e.base
            v.update({f"{e.equipment_id}.AckId": mem[b + P.M_ACK_ID],
                      f"{e.equipment_id}.ErrorCode": mem[b + P.M_ERROR_CODE],
                      f"{e.equipment_id}.AbortAckId": mem[b + P.M_ABORT_ACK_ID],
                      f"{e.equipment_id}.Running": bool(mem[b + P.M_RUNNING]),
                      f"{e.equipment_id}.Fault": mem[b + P.M_FAULT],
                      f"{e.equipment_id}.MachineryItemState": M.machinery_state(mem[b + P.M_RUNNING],
                                                                               mem[b + P.M_FAULT])})
            for n in range(1, e.slots + 1):
                s = b + 8 + 8 * (n - 1)
                key = f"{e.equipment_id}.{M.slot_name(n)}"
                v.update({f"{key}.Occupied": bool(mem[s + P.S_OCCUPIED]), f"{key}.Running": bool(mem[s + P.S_RUNNING]),
                          f"{key}.Done": bool(mem[s + P.S_DONE]), f"{key}.JobId": P.join_u32(mem[s + P.S_JOB_ID],
                                                                                       mem[s + P.S_JOB_ID + 1]),
                          f"{key}.ResultEvaluation": mem[s + P.S_RESULT],
                          f"{key}.ProductionProgramState": self._program(key, mem[s + P.S_OCCUPIED],
                                                                          mem[s + P.S_RUNNING], mem[s + P.S_DONE])})
        return v

    def _program(self, key: str, occupied: int, running: int, done: int) -> str:
        """A slot's ProductionProgram state: Running → Ended, or Aborted when a
        cycle stopped without ending (kept while the piece stays)."""
        before = self._program_state.get(key, M.PROGRAM_INITIALIZING)
        if running:
            state = M.PROGRAM_RUNNING
        elif done:
            state = M.PROGRAM_ENDED
        elif before in (M.PROGRAM_RUNNING, M.PROGRAM_ABORTED) and occupied:
            state = M.PROGRAM_ABORTED
        else:
            state = M.PROGRAM_INITIALIZING
        self._program_state[key] = state
        return state

    async def _publish(self) -> None:
        """Advance the model and write what changed (one notification per edge)."""
        self.model.advance()
        values = self._values()
        types = {s.key: s.type for s in self._signals}
        for key, value in values.items():
            if self._published.get(key) != value:
                self._published[key] = value
                await self._server.write_attribute_value(
                    self._node(key), ua.DataValue(ua.Variant(value, getattr(ua.VariantType, types[key]))))
        self._after_request()

    async def _before_read(self, event, _dispatcher) -> None:
        """A Read of the cell's variables sees the model's time now, as a Modbus read
        does (the model advances on every request there). Without it a Read showed
        the last tick's values: a cycle that had ended read as running."""
        if any(item.NodeId.NamespaceIndex == self._idx for item in event.request_params.NodesToRead):
            await self._publish()

    # -- methods ---------------------------------------------------------------

    def _method(self, handler, device: str):
        async def call(parent, *args):
            await self._answer_late()
            self.model.advance()
            try:
                outputs = handler(device, *[a.Value for a in args])
            except (TypeError, ValueError, KeyError) as exc:
                log.warning("sim: %s: bad call: %s", device, exc)
                return ua.StatusCode(ua.StatusCodes.BadInvalidArgument)
            await self._publish()  # the answer's variables before the call returns
            return outputs
        return call

    def _write(self, address: int, values: list[int]) -> None:
        self.model.on_request(address, values)

    def _execute(self, _device, action_id, command, src_station, src_slot, dst_station, dst_slot, aux_slot,
                 job_id, job2_id, text):
        _new_id(action_id)
        text = text or ""
        if len(text) > P.TEXT_MAX or not text.isascii():  # a bad call, never cut short (OPCUA_MAP.md)
            raise ValueError(f"Text: at most {P.TEXT_MAX} ASCII characters")
        r = self.model.map.robot_base
        self._write(r + P.R_CMD_CODE, [command, src_station, src_slot, dst_station, dst_slot, aux_slot,
                                       *P.split_u32(job_id), *P.split_u32(job2_id)])
        self._write(r + P.R_TEXT_IN, P.encode_text(text))
        self._write(r + P.R_CMD_ID, [action_id])
        return [ua.Variant(self.model.mem[r + P.R_ACK_ID] == action_id, ua.VariantType.Boolean)]

    def _start(self, device, action_id, slots, job_ids):
        _new_id(action_id)
        e = self.model.map.for_equipment(device)
        slots, job_ids = list(slots or []), list(job_ids or [])
        if len(slots) != len(job_ids) or any(not 1 <= s <= e.slots for s in slots):
            raise ValueError(f"Slots and JobIds: one job per slot, slots 1..{e.slots}")
        for slot, job in zip(slots, job_ids, strict=True):
            s = e.base + 8 + 8 * (slot - 1)
            self._write(s + P.S_JOB_ID, P.split_u32(job))
            self._write(s + P.S_START, [1])
        self._write(e.base + P.M_START_ID, [action_id])
        return [ua.Variant(self.model.mem[e.base + P.M_ACK_ID] == action_id, ua.VariantType.Boolean)]

    def _abort(self, device, action_id):
        _new_id(action_id)
        e = self.model.map.for_equipment(device)
        self._write(e.base + P.M_ABORT_ID, [action_id])
        return [ua.Variant(self.model.mem[e.base + P.M_ABORT_ACK_ID] == action_id, ua.VariantType.Boolean)]

    # SimControl: each writes its register of the "Simulator control" block, so the
    # injections behave exactly as over Modbus.

    def _control(self, offset: int, value: int) -> list:
        self._write(self.model.map.sim_control_base + offset, [max(0, min(65535, int(value)))])
        return []

    def _station(self, equipment_id: str) -> int:
        return self.model.map.for_equipment(equipment_id).station

    def _control_RobotError(self, _d, code):
        return self._control(P.C_ROBOT_FAIL_NEXT, code)

    def _control_RobotHang(self, _d):
        return self._control(P.C_ROBOT_HANG_NEXT, 1)

    def _control_MachineFault(self, _d, equipment_id):
        return self._control(P.C_FAULT_STATION, self._station(equipment_id))

    def _control_MachineHang(self, _d, equipment_id):
        return self._control(P.C_HANG_STATION, self._station(equipment_id))

    def _control_Drop(self, _d, ms):
        return self._control(P.C_DROP_MS, max(1, ms))

    def _control_Delay(self, _d, ms):
        return self._control(P.C_RESPONSE_DELAY_MS, ms)

    def _control_ScrapRate(self, _d, permille):
        return self._control(P.C_SCRAP_PERMILLE, permille)

    def _control_EmergencyStop(self, _d):
        return self._control(P.C_ESTOP, 1)

    def _control_RestartPlc(self, _d, ms):
        return self._control(P.C_RESTART_MS, max(1, ms))

    def _control_Clear(self, _d):
        return self._control(P.C_CLEAR, 1)

    def _control_TakeFromBuffer(self, _d, slot):
        return self._control(P.C_TAKE_FROM_BUFFER, slot)

    # -- connections -----------------------------------------------------------

    async def _close_connections(self) -> None:
        if self._server.bserver is not None:
            await self._server.bserver.stop()
            self._server.bserver = None

    async def _listen(self) -> None:
        bserver = BinaryServer(self._server.iserver, self.host, self.port, self._server.limits)
        bserver.set_policies(self._server._policies)
        await bserver.start()
        self._server.bserver = bserver

    # -- running ---------------------------------------------------------------

    async def _configure(self, server: Server) -> None:
        STANDARD_ADDRESS_SPACE.install(server)
        await server.init()
        server.set_endpoint(self.address)
        server.set_server_name("linectl line simulator")
        if self.publishing_interval is not None:
            publish_no_faster(server, self.publishing_interval)
        await server.set_application_uri("urn:linectl:sim")
        if self.security == "none":
            server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
            server.set_identity_tokens([ua.AnonymousIdentityToken])
            return
        cert, key = ensure_certificate(self.cert_dir, "linectl-sim", "urn:linectl:sim", server=True)
        self.server_certificate = cert
        await server.load_certificate(cert, "der")
        await server.load_private_key(key, format="pem")
        server.set_security_policy([ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt])
        server.set_identity_tokens([ua.UserNameIdentityToken])
        server.iserver.set_user_manager(PasswordUsers(self.user, self.password))
        if self.trusted_clients is not None:
            server.set_certificate_validator(self._trust_list)

    async def _trust_list(self, certificate: x509.Certificate, _description) -> None:
        if certificate.public_bytes(Encoding.DER) not in self.trusted_clients:
            raise ServiceError(ua.StatusCodes.BadCertificateUntrusted)

    async def _serve(self) -> None:
        server = self._server = Server()
        # asyncua builds its standard address space as ~500k objects: with the
        # collector on, each of its passes scans them all (seconds of start-up).
        collecting = gc.isenabled()
        gc.disable()
        try:
            await self._configure(server)
            await self._build(server)
            server.subscribe_server_callback(CallbackType.PreRead, self._before_read)
        finally:
            if collecting:
                gc.enable()
        await server.start()
        self._listening()
        try:
            while not self._stopping.is_set():
                if server.bserver is None and not self._down_for():
                    try:
                        await self._listen()
                    except OSError:  # the port is not free yet: again next tick
                        pass
                await self._publish()
                await self._pause(TICK)
        finally:
            await stop_now(server)


def _new_id(action_id: int) -> None:
    """ActionId 0 is a bad call (deploy/OPCUA_MAP.md, "Commands: the rules")."""
    if not action_id:
        raise ValueError("ActionId: 1..65535")
