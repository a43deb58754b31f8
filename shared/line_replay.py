"""A line's states, stops and planned downtime rebuilt from its event log
(docs/oee.md): the loop records each change both as a row and as an event in
the same transaction, so replaying ``LineStateChanged``, ``StopReasonAssigned``,
``StopSplit`` and ``PlannedDowntimeAdded`` in ``seq`` order gives the same rows,
ids included, and so the same stops and figures."""

from __future__ import annotations

from sqlalchemy import text

TYPES = ("LineStateChanged", "StopReasonAssigned", "StopSplit", "PlannedDowntimeAdded")


def rebuild_line_states(conn, events=None) -> int:
    """Empty ``line_state_interval`` and ``planned_downtime`` and fill them from
    ``events`` (frames ``{type, payload}`` in seq order; default: this schema's
    event log). Returns how many events were applied."""
    if events is None:
        events = [{"type": r.type, "payload": r.payload} for r in conn.execute(text(
            "SELECT type, payload FROM event_log WHERE type = ANY(:t) ORDER BY seq"), {"t": list(TYPES)})]
    conn.execute(text("DELETE FROM line_state_interval"))
    conn.execute(text("DELETE FROM planned_downtime"))
    applied = 0
    for frame in events:
        apply = _APPLY.get(frame["type"])
        if apply is not None:
            apply(conn, frame["payload"])
            applied += 1
    return applied


def _state_changed(conn, p: dict) -> None:
    conn.execute(text("UPDATE line_state_interval SET ended_at = :at WHERE ended_at IS NULL"), {"at": p["since"]})
    conn.execute(text("INSERT INTO line_state_interval (id, state, cause, equipment_id, started_at, seen_at) "
                      "VALUES (:id, :state, :cause, :e, :at, :at)"),
                 {"id": p["id"], "state": p["state"], "cause": p["cause"], "e": p["equipmentId"], "at": p["since"]})


def _reason(conn, p: dict) -> None:
    conn.execute(text("UPDATE line_state_interval SET reason_code = :r, comment = :c, assigned_by = :by, "
                      "assigned_at = :at WHERE id = :id"),
                 {"r": p["reasonCode"], "c": p["comment"], "by": p["assignedBy"], "at": p["assignedAt"],
                  "id": p["id"]})


def _split(conn, p: dict) -> None:
    first, second = p["stop"], p["newStop"]
    conn.execute(text("UPDATE line_state_interval SET ended_at = :at WHERE id = :id"),
                 {"at": first["to"], "id": first["id"]})
    conn.execute(text(
        "INSERT INTO line_state_interval (id, state, cause, equipment_id, started_at, ended_at, seen_at, "
        "reason_code, comment, assigned_by, assigned_at, split_from) VALUES (:id, 'DOWN', :cause, :e, :a, :b, "
        ":a, :r, :c, :by, :when, :from_id)"),
        {"id": second["id"], "cause": second["cause"], "e": second["equipmentId"], "a": second["from"],
         "b": second["to"], "r": second["reasonCode"], "c": second["comment"], "by": second["assignedBy"],
         "when": second["assignedAt"], "from_id": second["splitFrom"]})


def _planned(conn, p: dict) -> None:
    conn.execute(text("INSERT INTO planned_downtime (id, started_at, ended_at, reason, created_by, created_at) "
                      "VALUES (:id, :a, :b, :r, :by, :at)"),
                 {"id": p["id"], "a": p["from"], "b": p["to"], "r": p["reason"], "by": p["createdBy"],
                  "at": p["createdAt"]})


_APPLY = {"LineStateChanged": _state_changed, "StopReasonAssigned": _reason, "StopSplit": _split,
          "PlannedDowntimeAdded": _planned}
