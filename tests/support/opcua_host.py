"""A host's side of deploy/OPCUA_MAP.md for the PLC tests: the same calls and
the same returned shapes as :class:`tests.support.plc_host.PlcHost`, over OPC UA
(the NodeIds of services.hardware.opcua_map, the ones the hardware service
uses), so a test runs on either protocol.

Every read is a Read request to the server, not a subscription's copy: what a
test asserts is what the server shows at that moment, as a Modbus read is.

Transport: the hardware service's own driver (:class:`OpcUaPort`) for its
session and its asyncio loop in a real OS thread, running plain asyncua calls
on that session. Not ``asyncua.sync``: its loop thread is a green thread in
this monkey-patched process, and a second asyncio loop in the hub's OS thread
beside the simulator's refuses to run ("another loop is running")."""

from __future__ import annotations

import itertools

from services.hardware import opcua_map as M
from services.hardware.device.opcua import OpcUaPort
from services.hardware.plc import PlcUnavailable
from shared.layout import Layout
from tests.support.plc_host import RobotMoves
from tests.support.waiting import wait_for

REACHABLE_TIMEOUT = 1.0  # seconds a reachable() probe may take


class OpcUaHost(RobotMoves):
    # No START flag over OPC UA: the Start method takes the slots as arguments.
    SLOT_FIELDS = ("occupied", "done", "result", "job", "running")

    # A request is answered in milliseconds; the bound is for a loaded CI machine
    # (a read once took over 5 s there), not a figure any test relies on.
    def __init__(self, layout: Layout, url: str, timeout: float = 15.0):
        self.layout, self.map = layout, layout.plc
        self.timeout = timeout
        self.port = OpcUaPort(url, layout, timeout=timeout)
        self.node_ids = M.node_ids(layout)
        self._ids = itertools.count(1)
        self._resolved: tuple[object, dict] | None = None  # (the session's client, key → ua.NodeId)
        self.port.read_state()  # the first session is up (or PlcUnavailable)

    def close(self) -> None:
        self.port.close()

    # -- the session -----------------------------------------------------------

    def _session(self):
        """The driver's current client and every NodeId resolved against its server's
        namespace array (once per session: the index is the server's to choose)."""
        from asyncua import ua

        client = self.port._client
        if client is None:
            raise PlcUnavailable("CONNECTION_REFUSED", f"no OPC UA session with {self.port.url}")
        if self._resolved is None or self._resolved[0] is not client:
            namespaces = self.port._namespaces
            ids = {}
            for key, node_id in self.node_ids.items():
                if node_id.startswith("nsu="):
                    uri, _, rest = node_id[len("nsu="):].partition(";")
                    node_id = f"ns={namespaces.index(uri)};{rest}"
                ids[key] = ua.NodeId.from_string(node_id)
            self._resolved = (client, ids)
        return self._resolved

    def _read(self, keys: list[str], timeout: float | None = None) -> dict:
        """One Read request for these variables (signal keys of opcua_map)."""
        client, ids = self._session()
        nodes = [client.get_node(ids[k]) for k in keys]
        values = self.port._run(lambda: client.read_values(nodes), f"read at {self.port.url}", timeout)
        return dict(zip(keys, values, strict=True))

    def _call(self, device: str, method: str, args: list[tuple[object, str]]) -> bool:
        """Call a method of the map; its ``Accepted`` output."""
        from asyncua import ua

        client, ids = self._session()
        obj = client.get_node(ids[device])
        variants = [ua.Variant(v, getattr(ua.VariantType, t.removesuffix("[]"))) for v, t in args]
        result = self.port._run(lambda: obj.call_method(ids[f"{device}.{method}"], *variants),
                                f"{device}.{method} at {self.port.url}")
        return bool(result[0] if isinstance(result, list) else result)

    # -- robot -----------------------------------------------------------------

    def robot(self) -> dict:
        """The robot's variables, keyed as PlcHost's register fields."""
        v = self._read([f"{M.ROBOT}.{n}" for n in ("Fault", "AckId", "State", "DoneId", "ErrorCode")])
        return {"fault": v["Robot.Fault"], "ack": v["Robot.AckId"], "state": v["Robot.State"],
                "done": v["Robot.DoneId"], "error": v["Robot.ErrorCode"]}

    def send(self, code: int, src: tuple[int, int] = (0, 0), dst: tuple[int, int] = (0, 0),
             aux_slot: int = 0, job: int = 0, job2: int = 0) -> int:
        """Call Robot.Execute; returns its action id (not accepted while the robot is
        busy, as a strobe is ignored then over Modbus: the variables say)."""
        action_id = next(self._ids)
        args = [(action_id, M.UINT16), (code, M.UINT16), (src[0], M.UINT16), (src[1], M.UINT16),
                (dst[0], M.UINT16), (dst[1], M.UINT16), (aux_slot, M.UINT16), (job, M.UINT32),
                (job2, M.UINT32), ("", M.STRING)]
        self._call(M.ROBOT, "Execute", args)
        return action_id

    # -- machines --------------------------------------------------------------

    def machine(self, equipment_id: str) -> dict:
        slot_count = self.map.for_equipment(equipment_id).slots
        head = [f"{equipment_id}.{n}" for n in ("AckId", "ErrorCode", "AbortAckId", "Running", "Fault")]
        slots = [f"{equipment_id}.{M.slot_name(n)}.{name}" for n in range(1, slot_count + 1)
                 for name in ("Occupied", "Done", "ResultEvaluation", "JobId", "Running")]
        v = self._read(head + slots)
        e = equipment_id
        return {
            # START_ID and ABORT_ID are the host's strobes: over OPC UA the Start/Abort
            # methods' ActionId argument, seen as the id the PLC took (AckId, AbortAckId)
            "start_id": v[f"{e}.AckId"], "ack": v[f"{e}.AckId"], "error": v[f"{e}.ErrorCode"],
            "running": int(v[f"{e}.Running"]), "fault": v[f"{e}.Fault"],
            "abort_id": v[f"{e}.AbortAckId"], "abort_ack": v[f"{e}.AbortAckId"],
            "slots": [{"occupied": int(v[f"{k}.Occupied"]), "done": int(v[f"{k}.Done"]),
                       "result": v[f"{k}.ResultEvaluation"], "job": v[f"{k}.JobId"],
                       "running": int(v[f"{k}.Running"])}
                      for k in (f"{e}.{M.slot_name(n)}" for n in range(1, slot_count + 1))],
        }

    def start(self, equipment_id: str, slots: dict[int, int] | None = None) -> dict:
        """Call <machine>.Start (``slots``: slot no → job id; none: every loaded slot);
        returns the machine's variables once the start is answered."""
        action_id = next(self._ids)
        numbers = sorted(slots or {})
        self._call(equipment_id, "Start", [(action_id, M.UINT16), (numbers, M.UINT16 + "[]"),
                                           ([slots[n] for n in numbers], M.UINT32 + "[]")])
        return wait_for(lambda: (lambda m: m if m["ack"] == action_id else None)(self.machine(equipment_id)),
                        10, message=f"{equipment_id} answering start {action_id}")

    def abort(self, equipment_id: str) -> dict:
        """Call <machine>.Abort; returns the machine's variables once answered."""
        action_id = next(self._ids)
        self._call(equipment_id, "Abort", [(action_id, M.UINT16)])
        return wait_for(lambda: (lambda m: m if m["abort_ack"] == action_id else None)(self.machine(equipment_id)),
                        10, message=f"{equipment_id} answering abort {action_id}")

    # -- dock and buffer -------------------------------------------------------

    def dock(self) -> tuple[int, int]:
        v = self._read([f"{M.DOCK}.Pieces", f"{M.DOCK}.Arrivals"])
        return v["Dock.Pieces"], v["Dock.Arrivals"]

    def buffer(self) -> list[int]:
        keys = [f"{M.BUFFER}.{M.slot_name(n)}" for n in range(1, self.layout.buffer_slots + 1)]
        v = self._read(keys)
        return [int(v[k]) for k in keys]

    def reachable(self) -> bool:
        """A Read answered within REACHABLE_TIMEOUT. The driver opens a new session by
        itself once the server listens again (backing off up to 2 s)."""
        try:
            self._read([f"{M.DOCK}.Pieces"], timeout=REACHABLE_TIMEOUT)
        except PlcUnavailable:
            return False
        return True
