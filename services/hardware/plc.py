"""The PLC register map (offsets inside each block) and the Modbus TCP link
(the Modbus driver of the device port, services/hardware/device/modbus.py, uses both).

Base addresses come from the layout (``plc:`` keys, :class:`shared.layout.PlcMap`);
the offsets below are the ones documented in deploy/REGISTER_MAP.md. Every
value is a holding register (function codes 3, 6 and 16). Both the hardware
service and the simulator import this module, so the two sides cannot drift.
"""

from __future__ import annotations

import threading
import time

from pymodbus.client import ModbusTcpClient
from pymodbus.exceptions import ConnectionException, ModbusException, ModbusIOException

from services.hardware.device.port import PlcUnavailable  # re-exported: older imports name it here

LINK_FAILURES = ("CONNECTION_REFUSED", "MODBUS_TIMEOUT")  # an exchange that failed, not a PLC refused

# -- identity block (plc.identityBlock.base + offset, 20 registers; PLC, read-only) --
I_MAP_VERSION = 0   # the register map's version the PLC serves (MAP_VERSION); 0: no identity block
I_IDENTITY = 1      # the PLC's identity, 16 registers, 2 ASCII chars each (high byte first), NUL-padded
IDENTITY_REGISTERS = 16
# offsets 17..19 reserved (0)
MAP_VERSION = 1     # deploy/REGISTER_MAP.md as of its identity block

# -- robot block (robot_base + offset) -------------------------------------------
R_CMD_ID = 0        # host writes last: the action id (1..65535) strobes the command
R_CMD_CODE = 1
R_SRC_STATION = 2
R_SRC_SLOT = 3
R_DST_STATION = 4
R_DST_SLOT = 5
R_AUX_SLOT = 6      # SWAP: the buffer slot whose piece goes into the machine
R_JOB_ID = 7        # 2 registers, high word first
R_JOB2_ID = 9       # SWAP: the job loaded into the machine (2 registers)
R_FAULT = 11        # PLC: 0, or an error code while the robot cannot move (8: emergency stop)
R_ACK_ID = 12       # PLC: the action id it accepted
R_STATE = 13        # PLC: ROBOT_IDLE / ROBOT_BUSY / ROBOT_DONE / ROBOT_ERROR
R_DONE_ID = 14      # PLC: the action id that finished (done or error)
R_ERROR_CODE = 15   # PLC: PLC_ERRORS code of the finished action, 0 when done
R_TEXT_IN = 16      # MARK text, 16 registers, 2 ASCII chars each (high byte first)
R_TEXT_OUT = 32     # SCAN result (barcode), 16 registers
TEXT_REGISTERS = 16
TEXT_MAX = 2 * TEXT_REGISTERS

ROBOT_IDLE, ROBOT_BUSY, ROBOT_DONE, ROBOT_ERROR = 0, 1, 2, 3

# Robot command codes.
CMD_DOCK_TO_BUFFER = 1
CMD_BUFFER_TO_EQUIPMENT = 2
CMD_EQUIPMENT_TO_BUFFER = 3
CMD_SWAP = 4
CMD_SCAN = 5
CMD_MARK = 6
CMD_BUFFER_TO_DOCK = 7

# -- dock block --------------------------------------------------------------------
D_PIECES = 0        # pieces waiting at the dock
D_ARRIVAL_SEQ = 1   # +1 on every pallet arrival (the PalletArrived edge)

# -- buffer block: one register per slot (slot n at buffer_base + n - 1), 1 = occupied

# -- machine block (base + offset) -----------------------------------------------
M_START_ID = 0      # host writes the action id: start the machine
M_ACK_ID = 1        # PLC: the start action id it answered
M_ERROR_CODE = 2    # PLC: 0 = started, else a PLC_ERRORS code
M_RUNNING = 3
M_FAULT = 4         # 0 or a PLC_ERRORS code
M_ABORT_ID = 5      # host writes an action id: abort every running cycle (pieces stay)
M_ABORT_ACK_ID = 6  # PLC: the abort action id it answered
# slot n (1-based) at base + 8 + 8 * (n - 1):
S_OCCUPIED = 0
S_DONE = 1          # rises when the slot's cycle finishes; falls when it is unloaded/restarted
S_RESULT = 2        # inspection verdict: 0 none, 1 pass, 2 fail
S_JOB_ID = 3        # 2 registers, high word first
S_RUNNING = 5
S_START = 6         # host sets 1 for each slot to start before writing M_START_ID
RESULT_PASS, RESULT_FAIL = 1, 2

# -- simulator control block (simControl base; the simulator only) ---------------
C_ROBOT_FAIL_NEXT = 0    # error code the next robot/tool action finishes with
C_ROBOT_HANG_NEXT = 1    # 1: the next robot/tool action is acknowledged, never finished
C_FAULT_STATION = 2      # station number: that machine faults now (MACHINE_FAULT)
C_HANG_STATION = 3       # station number: that machine's cycles never report done
C_DROP_MS = 4            # drop every connection and refuse new ones for this many ms
C_CLEAR = 5              # 1: clear every injected fault
C_SCRAP_PERMILLE = 6     # inspection fail rate, per mille
C_RESPONSE_DELAY_MS = 7  # answer every request this late (provokes Modbus timeouts)
C_ESTOP = 8              # 1: emergency stop now (every machine and the robot fault 8) until CLEAR
C_RESTART_MS = 9         # the PLC restarts: down this many ms, back with its registers reset
C_TAKE_FROM_BUFFER = 10  # buffer slot N: a person takes its piece out by hand (the sensor goes false)
# offsets 11..15 reserved (0)

PLC_ERRORS = {
    1: "no piece at the source position",
    2: "target position is occupied",
    3: "gripper fault",
    4: "invalid command",
    5: "machine is busy",
    6: "machine fault",
    7: "nothing to start",
    8: "emergency stop",
}


ERR_SOURCE_EMPTY = 1  # refused before moving: reported as SOURCE_EMPTY, not PLC_ERROR
ERR_EMERGENCY_STOP = 8


def plc_error_message(code: int) -> str:
    return f"PLC error {code}: {PLC_ERRORS.get(code, 'unknown error')}"


def split_u32(value: int) -> list[int]:
    return [(value >> 16) & 0xFFFF, value & 0xFFFF]


def join_u32(high: int, low: int) -> int:
    return (high << 16) | low


def encode_text(text: str) -> list[int]:
    raw = text.encode("ascii")[:TEXT_MAX].ljust(TEXT_MAX, b"\0")
    return [(raw[i] << 8) | raw[i + 1] for i in range(0, TEXT_MAX, 2)]


def decode_text(registers: list[int]) -> str:
    raw = b"".join(bytes([(r >> 8) & 0xFF, r & 0xFF]) for r in registers)
    return raw.rstrip(b"\0").decode("ascii", errors="replace")


# -- the link --------------------------------------------------------------------


class PlcLink:
    """One Modbus TCP connection, shared by the robot queue, machine starts and
    the watcher. Exchanges are serialised by a lock (one request in flight);
    a failed exchange closes the socket and the next one reconnects."""

    def __init__(self, host: str, port: int, unit_id: int = 1, timeout: float = 2.0, on_connect=None,
                 refusal_backoff: tuple[float, float] = (0.1, 2.0)):
        self.host, self.port, self.unit_id, self.timeout = host, port, unit_id, timeout
        # ``on_connect(read)``: called on every new connection before it serves any
        # request (``read(address, count)`` reads on it); raising refuses the connection
        # (the hardware's identity check: nothing is written to a PLC before it passes).
        self.on_connect = on_connect
        # After a refusal, requests fail with it, unconnected, for a pause doubling from
        # the first to the last of these (seconds) until a connection passes: a wrong
        # PLC is not reconnected to at every poll, and the right one is found within
        # the longest pause once it answers.
        self.refusal_backoff = refusal_backoff
        self._refusal: PlcUnavailable | None = None  # the last refusal, while it holds
        self._refused_until = 0.0  # monotonic time before which no connection is tried
        self._refusal_pause = 0.0
        self._client: ModbusTcpClient | None = None
        self._lock = threading.Lock()  # green under eventlet: a semaphore between greenthreads

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _connected_client(self) -> ModbusTcpClient:
        if self._client is not None and not self._client.connected:
            self._drop()  # pymodbus closed it: its next request would reconnect unseen (and unchecked)
        if self._client is None:
            if self._refusal is not None and time.monotonic() < self._refused_until:
                raise PlcUnavailable(self._refusal.code, self._refusal.message)  # not tried again yet
            client = ModbusTcpClient(self.host, port=self.port, timeout=self.timeout, retries=0)
            if not client.connect():
                client.close()
                raise PlcUnavailable("CONNECTION_REFUSED", f"no PLC answers at {self.address}")
            self._client = client
            if self.on_connect is not None:
                try:
                    self.on_connect(self._read_unlocked)
                except PlcUnavailable as exc:
                    self._drop()  # the next request connects (and checks) again
                    if exc.code not in LINK_FAILURES:  # refused, not lost while asking
                        self._back_off(exc)
                    raise
                except BaseException:
                    self._drop()
                    raise
            self._refusal, self._refusal_pause = None, 0.0
        return self._client

    def retry_now(self) -> None:
        """The next request connects (and checks) again, whatever the pause after a
        refusal: an action waiting for its PLC must not wait out a pause its grace
        cannot (the pause goes on doubling if the PLC is refused again)."""
        self._refused_until = 0.0

    def _back_off(self, refusal: PlcUnavailable) -> None:
        first, longest = self.refusal_backoff
        self._refusal_pause = min(longest, self._refusal_pause * 2 if self._refusal_pause else first)
        self._refusal, self._refused_until = refusal, time.monotonic() + self._refusal_pause

    def _exchange(self, fn):
        with self._lock:
            return self._exchange_unlocked(fn)

    def _read_unlocked(self, address: int, count: int) -> list[int]:
        """A read on the connection being made (the lock is held)."""
        response = self._exchange_unlocked(
            lambda c: c.read_holding_registers(address, count=count, device_id=self.unit_id))
        return list(response.registers)

    def _exchange_unlocked(self, fn):
        try:
            response = fn(self._connected_client())
        except PlcUnavailable:
            raise
        except ModbusIOException as exc:
            self._drop()
            raise self._classify(exc) from None
        except (ConnectionException, OSError) as exc:
            self._drop()
            raise PlcUnavailable("CONNECTION_REFUSED", f"PLC at {self.address}: {exc}") from None
        except ModbusException as exc:
            self._drop()
            raise PlcUnavailable("MODBUS_TIMEOUT", f"PLC at {self.address}: {exc}") from None
        if response.isError():
            raise PlcUnavailable("PLC_ERROR", f"PLC at {self.address} answered {response}")
        return response

    def _classify(self, exc: Exception) -> PlcUnavailable:
        text = str(exc).lower()
        if "timeout" in text or "no response" in text:
            return PlcUnavailable("MODBUS_TIMEOUT", f"PLC at {self.address} did not answer in {self.timeout}s")
        return PlcUnavailable("CONNECTION_REFUSED", f"PLC at {self.address}: connection lost ({exc})")

    def read(self, address: int, count: int) -> list[int]:
        out: list[int] = []
        while count > 0:  # Modbus reads at most 125 registers at once
            n = min(count, 125)
            response = self._exchange(
                lambda c, a=address, n=n: c.read_holding_registers(a, count=n, device_id=self.unit_id)
            )
            out.extend(response.registers)
            address += n
            count -= n
        return out

    def write(self, address: int, values: list[int]) -> None:
        self._exchange(lambda c: c.write_registers(address, list(values), device_id=self.unit_id))


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {text!r}")
    return host, int(port)
