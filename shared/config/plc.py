"""PLC and simulator settings: where the hardware service finds the PLC, which
field protocol it speaks (Modbus TCP or OPC UA, with OPC UA's security), and
the simulator that plays the PLC when ``LINECTL_PLC=sim``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from urllib.parse import urlsplit

from .parse import (
    PREFIX,
    SettingsError,
    choice,
    expanded_path,
    floats,
    ints,
    parse_int,
    setting,
    stripped,
    verbatim,
)


def parse_plc(name: str, raw: str) -> str:
    raw = raw.strip()
    if raw == "sim":
        return raw
    expected = "expected 'sim', host:port (Modbus TCP) or opc.tcp://host:port[/path] (OPC UA)"
    if "://" in raw:
        parts = urlsplit(raw)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme != "opc.tcp" or not parts.hostname or port is None or parts.query or parts.fragment:
            raise SettingsError(f"{PREFIX}{name}: {expected}, got {raw!r}")
        return raw
    host, sep, port = raw.rpartition(":")
    if not sep or not host:
        raise SettingsError(f"{PREFIX}{name}: {expected}, got {raw!r}")
    parse_int(name, port, 1, 65535)
    return raw


@dataclasses.dataclass(frozen=True)
class PlcSettings:
    plc: str = setting("sim", parse_plc)
    sim_host: str = setting("127.0.0.1", stripped)
    sim_port: int = setting(5020, ints(1, 65535))
    sim_speed: float = setting(1.0, floats(0.0, 10000.0))
    # What the simulator speaks when LINECTL_PLC=sim: "modbus" or "opcua".
    sim_protocol: str = setting("modbus", choice(("modbus", "opcua")))
    # OPC UA client (deploy/OPCUA_MAP.md, "Security"): "" picks "none" for the
    # simulator on loopback and "sign-and-encrypt" (Basic256Sha256) for a real PLC.
    opcua_security: str = setting("", choice(("none", "sign-and-encrypt")))
    opcua_user: str | None = setting(None, stripped)
    opcua_password: str | None = setting(None, verbatim)
    # The client's certificate and key (PEM); unset -> generated once into the certificate
    # directory (the simulator's server certificate too): opcua_cert_dir, unset <data_dir>/opcua/.
    opcua_cert: Path | None = setting(None, expanded_path)
    opcua_key: Path | None = setting(None, expanded_path)
    opcua_cert_dir: Path | None = setting(None, expanded_path)
    # The server certificate to trust (PEM or DER); unset -> the one the server presents.
    opcua_server_cert: Path | None = setting(None, expanded_path)

    @property
    def plc_address(self) -> tuple[str, int]:
        """Where the hardware service finds the PLC (the simulator when ``sim``)."""
        if self.plc == "sim":
            return self.sim_host, self.sim_port
        if self.plc.startswith("opc.tcp://"):
            netloc = urlsplit(self.plc).netloc
            host, _, port = netloc.rpartition(":")
            return host.strip("[]"), int(port)
        host, _, port = self.plc.rpartition(":")
        return host, int(port)

    @property
    def plc_protocol(self) -> str:
        """"modbus" or "opcua": what the hardware service speaks to the PLC."""
        if self.plc == "sim":
            return self.sim_protocol
        return "opcua" if self.plc.startswith("opc.tcp://") else "modbus"

    @property
    def plc_url(self) -> str:
        """The device port's address: ``host:port`` (Modbus) or ``opc.tcp://…``."""
        if self.plc != "sim":
            return self.plc
        if self.sim_protocol == "opcua":
            return f"opc.tcp://{self.sim_host}:{self.sim_port}"
        return f"{self.sim_host}:{self.sim_port}"

    @property
    def opcua_security_mode(self) -> str:
        """"none" or "sign-and-encrypt": the configured one, else None only for the simulator."""
        if self.opcua_security:
            return self.opcua_security
        return "none" if self.plc == "sim" else "sign-and-encrypt"
