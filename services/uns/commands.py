"""What the publisher does with a command it refuses (PRODUCT.md: nothing on the
floor is commanded over MQTT, and each refusal is in the audit).

A refused NCMD or DCMD is written to ``people_audit`` (action
``MQTT_COMMAND_REFUSED``, source ``mqtt``, the line, the topic, the metrics it
named) and logged. Hostile input (garbage, a huge payload, a flood) is logged
once per reason and minute, with how many were left unsaid, and at most
``AUDIT_PER_MINUTE`` refusals per line and minute reach the audit (the rest are
counted in the next row's ``detail.notAudited``): a flood on a broker's topic
must not become a flood in the database."""

from __future__ import annotations

import json
import logging
import time

from sqlalchemy import text

log = logging.getLogger(__name__)

LOG_EVERY_SECONDS = 60.0
AUDIT_PER_MINUTE = 60


class CommandDesk:
    def __init__(self, node, outbox):
        self.node = node
        self.outbox = outbox
        self._logged: dict[str, tuple[float, int]] = {}  # reason -> (when last logged, unsaid since)
        self._window = (0.0, 0)  # (minute start, audited in it)
        self._not_audited = 0

    def refused(self, topic: str, command) -> None:
        self._log(topic, command)
        now = time.monotonic()
        start, audited = self._window
        if now - start >= 60.0:
            start, audited = now, 0
        if audited >= AUDIT_PER_MINUTE:
            self._not_audited += 1
            self._window = (start, audited)
            return
        self._window = (start, audited + 1)
        detail = {**(command.detail or {}), "topic": topic[:200], "reason": command.refused}
        if self._not_audited:
            detail["notAudited"], self._not_audited = self._not_audited, 0
        try:
            with self.outbox.engine.begin() as conn:
                conn.execute(text(
                    "INSERT INTO people_audit (actor, action, target_type, target_id, line_id, outcome, source,"
                    " detail) VALUES ('mqtt', 'MQTT_COMMAND_REFUSED', 'mqtt_command', :target, :line, 'REFUSED',"
                    " 'mqtt', CAST(:detail AS jsonb))"),
                    {"target": (command.detail or {}).get("kind", "command"), "line": self.node.line_id,
                     "detail": json.dumps(detail)})
        except Exception:  # noqa: BLE001 - the audit is away: the refusal stands, the log has it
            log.warning("uns %s: a refused MQTT command could not be audited", self.node.line_id, exc_info=True)

    def _log(self, topic: str, command) -> None:
        now = time.monotonic()
        last, unsaid = self._logged.get(command.refused, (None, 0))
        if last is not None and now - last < LOG_EVERY_SECONDS:
            self._logged[command.refused] = (last, unsaid + 1)
            return
        more = f" ({unsaid} more since)" if unsaid else ""
        log.warning("uns %s: refused a command on %s: %s%s", self.node.line_id, topic[:200], command.refused, more)
        self._logged[command.refused] = (now, 0)
