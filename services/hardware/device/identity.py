"""The PLC's identity (PRODUCT.md, "PLC identity"): a line must know it talks to
its own PLC. Each driver reads what the PLC publishes on every connect and
reconnect, before anything else goes to it (Modbus: the identity block of
deploy/REGISTER_MAP.md; OPC UA: ``Cell/Identity`` of deploy/OPCUA_MAP.md), and
hands it to :meth:`IdentityCheck.check`. A mismatch is a
:class:`PlcUnavailable` with code ``PLC_IDENTITY_MISMATCH``: the link is not
made, so no command can follow, and the PLC counts as not connected until the
right one answers (a wrong address, a swapped cable, another stack's simulator).
"""

from __future__ import annotations

import logging

from services.hardware.device.port import PLC_IDENTITY_MISMATCH, PlcUnavailable
from shared.config import Settings
from shared.layout import IDENTITY_MAX, Layout

log = logging.getLogger(__name__)

__all__ = ["PLC_IDENTITY_MISMATCH", "IdentityCheck", "expected_identity"]


def expected_identity(layout: Layout, settings: Settings) -> str | None:
    """What the line's PLC must publish: the layout's ``plc.identity``; without
    one, for the simulator (``LINECTL_PLC=sim``), the line's id, which is what a
    simulator of this line serves (so another line's simulator, or another
    stack's on the same port, is refused); else nothing (the found one is logged)."""
    if layout.plc is not None and layout.plc.identity:
        return layout.plc.identity
    return layout.id if settings.plc == "sim" else None


class IdentityCheck:
    """The line's expectation, and what its PLC last said it is (``found``: None
    until read, or when the PLC publishes none). Shared by a line's links."""

    def __init__(self, expected: str | None, line_id: str, address: str):
        self.expected = expected
        self.line_id = line_id
        self.address = address
        self.found: str | None = None
        self._said: tuple[str | None, int | None] | None = None  # logged once per new answer

    def check(self, found: str | None, map_version: int | None = None) -> None:
        """After a connect, before anything is sent: raise PLC_IDENTITY_MISMATCH
        unless ``found`` is the expected identity (no expectation: anything goes)."""
        self.found = found
        matches = self.expected is None or found == self.expected
        if matches and self._said != (found, map_version):
            self._said = (found, map_version)
            version = f", register map version {map_version}" if map_version else ""
            log.info("the PLC at %s identifies as %s%s%s", self.address,
                     repr(found) if found is not None else "nobody (it publishes no identity)", version,
                     "" if self.expected is None else " (as expected)")
        if not matches:
            self._said = None  # the watcher says it (once per edge); a later match is news
            raise PlcUnavailable(PLC_IDENTITY_MISMATCH, self.mismatch(found))

    def mismatch(self, found: str | None) -> str:
        # What was expected and found come first: the line's alarm carries at most
        # 200 characters of it (a long address is what a cut takes).
        said = repr(found) if found is not None else "no identity (a PLC without the identity block)"
        if len(said) > 2 * IDENTITY_MAX:  # not an identity a layout can name: enough to tell which
            said = said[:2 * IDENTITY_MAX - 1] + "…"
        return (f"{PLC_IDENTITY_MISMATCH}: line {self.line_id} expects the PLC {self.expected!r}, "
                f"found {said} at {self.address}; nothing is sent to it")
