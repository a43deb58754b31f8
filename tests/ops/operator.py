"""An automated operator for crash tests: answers the recovery questions the
way a person at the cell would, by looking at the cell (the simulator's PLC
state through the hardware service's ``plc_state()``), through the gateway's
REST API like the page does."""

from __future__ import annotations

import time

from shared import events as ev

ROBOT_IDLE_WAIT = 30.0


def plc_state(amqp_uri: str, timeout: float = 5.0, hardware: str = ev.HARDWARE) -> dict | None:
    from nameko.standalone.rpc import ClusterRpcProxy

    try:
        with ClusterRpcProxy({"AMQP_URI": amqp_uri, "serializer": "json"}, timeout=timeout) as rpc:
            return getattr(rpc, hardware).plc_state()
    except Exception:  # noqa: BLE001 - the hardware service is restarting: ask again later
        return None


def loop_status(amqp_uri: str, timeout: float = 10.0) -> dict:
    """The line_controller's ``status()`` (its queue, counters and holds)."""
    from nameko.standalone.rpc import ClusterRpcProxy

    with ClusterRpcProxy({"AMQP_URI": amqp_uri, "serializer": "json"}, timeout=timeout) as rpc:
        return rpc.line_controller.status()


def _slot(plc, equipment_id, slot_no):
    machine = next((m for m in plc.get("equipment", []) if m["id"] == equipment_id), {})
    return next((s for s in machine.get("slots", []) if s["slotNo"] == slot_no), {})


def _buffer_occupied(plc, slot_no):
    return any(b["slotNo"] == slot_no and b["occupied"] for b in plc.get("buffer", []))


def answer_for(action: dict, task: dict | None, plc: dict) -> str:
    """What the cell shows: did the interrupted action happen? Did the cycle end?"""
    if action["kind"] == "RECOVERY_MACHINE_IDLE_BUT_DB_RUNNING":
        machine = next((m for m in plc.get("equipment", []) if m["id"] == action["equipmentId"]), {})
        jobs = set((action.get("context") or {}).get("jobIds") or [])
        done = [s for s in machine.get("slots", []) if s.get("done") and s.get("jobId") in jobs]
        return "CYCLE_DONE" if done else "CONFIRM"
    if action["kind"] == "RECOVERY_BUFFER_PIECE_MISSING":
        slot = (action.get("context") or {}).get("tempSlotNo")
        return "CONFIRM" if _buffer_occupied(plc, slot) else "PIECE_REMOVED"
    if action["kind"] == "RECOVERY_MACHINE_PIECE_MISSING":  # where is the piece the PLC does not see?
        context, facts = action.get("context") or {}, action.get("facts") or {}
        if _slot(plc, action["equipmentId"], context.get("slotNo")).get("occupied"):
            return "CONFIRM"
        return "PIECE_UNLOADED" if _buffer_occupied(plc, facts.get("bufferSlot")) else "PIECE_REMOVED"
    if action["kind"] != "RECOVERY_TASK_OUTCOME_UNKNOWN" or task is None:
        return "CONFIRM"
    params, kind = task.get("params") or {}, task["kind"]
    if kind == ev.DOCK_TO_BUFFER:
        return "ACTION_DONE" if _buffer_occupied(plc, params.get("bufferSlot")) else "CONFIRM"
    if kind == ev.BUFFER_TO_DOCK:
        return "CONFIRM" if _buffer_occupied(plc, params.get("bufferSlot")) else "ACTION_DONE"
    if kind == ev.BUFFER_TO_EQUIPMENT:
        return "ACTION_DONE" if _slot(plc, task["equipmentId"], task["slotNo"]).get("occupied") else "CONFIRM"
    if kind == ev.EQUIPMENT_TO_BUFFER:
        return "CONFIRM" if _slot(plc, task["equipmentId"], task["slotNo"]).get("occupied") else "ACTION_DONE"
    if kind == ev.SWAP:
        loaded = _slot(plc, task["equipmentId"], task["slotNo"]).get("jobId")
        return "ACTION_DONE" if loaded == (params.get("jobIds") or [None, None])[-1] else "CONFIRM"
    if kind == ev.START_MACHINE:
        # Look at the slots this start was for, not the machine: another slot of it
        # may be running or done with another piece.
        machine = next((m for m in plc.get("equipment", []) if m["id"] == task["equipmentId"]), {})
        slots = {s["slotNo"]: s for s in machine.get("slots", [])}
        started = [n for n, job in (params.get("jobs") or {}).items()
                   if slots.get(int(n), {}).get("running")
                   or (slots.get(int(n), {}).get("done") and slots[int(n)].get("jobId") == job)]
        return "ACTION_DONE" if started else "CONFIRM"
    return "CONFIRM"  # a scan or a mark is simply done again


def _path(prefix: str, path: str) -> str:
    """``/api/x`` under a line's prefix (``/api/lines/<id>/x``), or as it is."""
    return prefix + path.removeprefix("/api") if prefix else path


def resolve_open_recovery(stack, token: str, amqp_uri: str, line_id: str | None = None) -> int:
    """Answer every open recovery action once the robot is at rest; how many.
    ``line_id``: a plant's line other than the default one."""
    prefix = f"/api/lines/{line_id}" if line_id else ""
    hardware = ev.LineServices(line_id).hardware
    code, body = stack.get(_path(prefix, "/api/manual-actions?status=OPEN&limit=500"), token)
    if code != 200:
        return 0
    actions = [a for a in body["items"] if a["kind"].startswith("RECOVERY")]
    if not actions:
        return 0
    deadline = time.monotonic() + ROBOT_IDLE_WAIT
    plc = None
    while time.monotonic() < deadline:  # a person waits for the robot to stop too
        plc = plc_state(amqp_uri, hardware=hardware)
        if plc and plc.get("connected") and plc.get("robot", {}).get("state") != "BUSY":
            break
        time.sleep(0.2)
    if not plc or not plc.get("connected"):
        return 0
    answered = 0
    for action in actions:
        task_id = (action.get("context") or {}).get("taskId")
        task = None
        if task_id:
            code, tasks = stack.get(_path(prefix, "/api/tasks?status=FAILED&limit=500"), token)
            task = next((t for t in tasks.get("items", []) if t["id"] == task_id), None)
        choice = answer_for(action, task, plc)
        code, _ = stack.request("POST", _path(prefix, f"/api/manual-actions/{action['id']}/resolve"),
                                {"resolution": choice}, token, timeout=30)
        answered += code == 200
    return answered


# The answers a person may pick for a stopped machine: every one of them ends with
# the cell empty (RETURN_TO_BUFFER and SCRAP unload the pieces by robot).
FAULT_KINDS = ("MACHINE_FAULT_DURING_CYCLE", "CYCLE_OVERDUE")
# A failed robot action or start answered RETRY (the piece is where it was: the PLC
# refused the move); SCRAP would leave a piece in the cell that the records call gone.
RETRY_KINDS = ("ACTION_FAILED", "EQUIPMENT_FAULT")


def resolve_open_faults(stack, token: str, rng, answers: dict | None = None, line_id: str | None = None) -> int:
    """Answer every open fault question with a random allowed choice, as a scripted
    operator at the cell; an answer refused with 409 EQUIPMENT_FAULTED (the PLC's
    clear not seen yet) is left for the next call. How many were accepted;
    ``answers`` counts them by (kind, choice). ``line_id``: a plant's line (its
    ``/api/lines/<id>`` paths) instead of the default line."""
    prefix = f"/api/lines/{line_id}" if line_id else ""
    code, body = stack.get(_path(prefix, "/api/manual-actions?status=OPEN&limit=500"), token)
    if code != 200:
        return 0
    accepted = 0
    for action in body["items"]:
        if action["kind"] in FAULT_KINDS:
            choice = rng.choice(action["choices"])
        elif action["kind"] in RETRY_KINDS:
            # an action that failed the same way twice in a row offers no plain RETRY
            choice = "RETRY" if "RETRY" in action["choices"] else "RETRY_AFTER_CHECK"
        else:
            continue
        code, reply = stack.request("POST", _path(prefix, f"/api/manual-actions/{action['id']}/resolve"),
                                    {"resolution": choice}, token, timeout=30)
        if code == 200:
            accepted += 1
            if answers is not None:
                answers[(action["kind"], choice)] = answers.get((action["kind"], choice), 0) + 1
        elif code != 409:
            raise AssertionError(f"answer {choice} to {action['kind']} {action['id']}: {code} {reply}")
    return accepted
