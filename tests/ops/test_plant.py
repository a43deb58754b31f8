"""A plant of three lines under one ``linectl up`` (PRODUCT.md, "Plant (several
lines)"; issue 38's "done when"): the demo plant (``deploy/plant.yaml``: two
lines on Modbus, one on OPC UA, two different layouts) runs an order on every
line at once through ``/api/lines/{id}/…``, and one line's controller going
down stops only that line.

- Every order completes with exact counts; each line's stream is gapless, and
  every object and frame carries its ``lineId``.
- cell-b's controller frozen mid-order (SIGSTOP: down, as a hung process is):
  its commands answer 503, ``/readyz`` names the line, and the two other lines
  each complete a piece meanwhile. Then it is killed; the supervisor respawns it
  and its order completes exactly."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from urllib.parse import quote

from tests.ops.invariants import line_invariants
from tests.ops.operator import resolve_open_recovery
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
PLANT = ROOT / "deploy" / "plant.yaml"
ORDERS = {"cell-a": ("BRACKET-A", 4), "cell-b": ("SHAFT-B", 6), "cell-c": ("BRACKET-A", 4)}


def line_pid(stack, service: str, line_id: str) -> int | None:
    """The pid of ``line_id``'s ``service`` process (its command line names both)."""
    for pid in stack.pids():
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        if service in args and line_id in args and int(pid) != stack.proc.pid:
            return int(pid)
    return None


def line_db_url(stack, line_id: str) -> str:
    """The database URL scoped to ``line_id``'s schema (for the invariants' SQL)."""
    schema = "public" if line_id == "cell-a" else f'"line_{line_id}"'
    separator = "&" if "?" in stack.database_url() else "?"
    return stack.database_url() + separator + "options=" + quote(f"-csearch_path={schema}")


def progress(stack, token, line_id: str, order_id: int) -> int:
    code, order = stack.get(f"/api/lines/{line_id}/work-orders/{order_id}", token)
    assert code == 200 and order["lineId"] == line_id, order
    return order["completedQty"] + order["scrappedQty"]


def line_events(stack, token, line_id: str) -> list[dict]:
    """Every event of ``line_id``'s log, page by page."""
    events, after = [], 0
    while True:
        code, page = stack.get(f"/api/lines/{line_id}/events?after={after}&limit=500", token)
        assert code == 200, page
        events += page["items"]
        if not page["nextCursor"]:
            return events
        after = page["nextCursor"]


def test_three_lines_run_at_once_and_one_line_down_stops_only_that_line(stack_factory):
    stack = stack_factory(sim_speed=40.0, extra_env={"LINECTL_PLANT_FILE": str(PLANT)},
                          lines=len(ORDERS)).up()
    stack.wait_line("linectl: ready", 180)
    token = stack.token("operator")
    code, lines = stack.get("/api/lines", token)
    assert code == 200 and [line["id"] for line in lines["items"]] == list(ORDERS), lines
    for line_id in ORDERS:
        for service in ("line_controller", "hardware", "sim"):
            assert line_pid(stack, service, line_id), f"no {service} process for {line_id}:\n{stack.ps()}"

    orders = {}
    for line_id, (product, quantity) in ORDERS.items():
        code, order = stack.request("POST", f"/api/lines/{line_id}/work-orders",
                                    {"productId": product, "quantity": quantity}, token)
        assert code == 201 and order["lineId"] == line_id, order
        assert stack.request("POST", f"/api/lines/{line_id}/work-orders/{order['id']}/start", {}, token)[0] == 200
        orders[line_id] = order
    assert len({o["id"] for o in orders.values()}) == 3  # ids are the plant's
    # Another line's order under a line's path is not there.
    assert stack.get(f"/api/lines/cell-a/work-orders/{orders['cell-b']['id']}", token)[0] == 404

    # cell-b's controller down mid-order: only cell-b stops.
    wait_for(lambda: progress(stack, token, "cell-b", orders["cell-b"]["id"]) >= 1, 120, 0.2, "cell-b's first piece")
    frozen = line_pid(stack, "line_controller", "cell-b")
    os.kill(frozen, signal.SIGSTOP)
    try:
        before = {i: progress(stack, token, i, orders[i]["id"]) for i in ("cell-a", "cell-c")}

        def refused_and_named():
            code, body = stack.request("POST", "/api/lines/cell-b/work-orders",
                                       {"productId": "SHAFT-B", "quantity": 1}, token, timeout=30)
            ready_code, ready = stack.get("/readyz")
            return code == 503 and body["error"]["code"] == "UNAVAILABLE" and ready_code == 503 \
                and "cell-b" in str(ready)
        wait_for(refused_and_named, 60, 0.5, "cell-b's commands 503 and /readyz naming cell-b")
        assert stack.request("POST", "/api/lines/cell-a/work-orders", {"productId": "BRACKET-A", "quantity": 1},
                             token)[0] == 201  # another line takes commands meanwhile
        wait_for(lambda: all(progress(stack, token, i, orders[i]["id"]) > before[i] for i in before),
                 120, 0.5, "cell-a and cell-c each completing a piece while cell-b is down")
    finally:
        os.kill(frozen, signal.SIGKILL)
    wait_for(lambda: line_pid(stack, "line_controller", "cell-b") not in (None, frozen), 60, 0.1,
             "cell-b's controller respawned")

    def all_completed():
        # The respawned controller may ask about what the killed one left (answered as a person would).
        resolve_open_recovery(stack, token, stack.amqp_uri(), "cell-b")
        return all(stack.get(f"/api/lines/{i}/work-orders/{o['id']}", token)[1].get("status") == "COMPLETED"
                   for i, o in orders.items())
    wait_for(all_completed, 240, 0.5, "every line's order completing")

    serials: set[str] = set()
    for line_id, (_product, quantity) in ORDERS.items():
        order_id = orders[line_id]["id"]
        done = stack.get(f"/api/lines/{line_id}/work-orders/{order_id}", token)[1]
        assert done["completedQty"] + done["scrappedQty"] == quantity, done
        assert line_invariants(line_db_url(stack, line_id), order_id) == [], line_id
        events = line_events(stack, token, line_id)
        seqs = [e["seq"] for e in events]
        assert seqs == list(range(1, len(seqs) + 1)), f"{line_id}'s seq has gaps"
        assert {e["lineId"] for e in events} == {line_id}
        serials |= assert_piece_records(stack, token, line_id, order_id, events)
    assert len(serials) == sum(q for _p, q in ORDERS.values())  # no two pieces of the plant share a serial


def assert_piece_records(stack, token, line_id: str, order_id: int, events: list[dict]) -> set[str]:
    """Every finished piece of the order has its record (PRODUCT.md, "Piece traceability"):
    found from its serial on any line (``/api/plant/pieces``), its steps the route's on
    machines of the step's kind, one after another within the piece's life, its inspection
    step's verdict the inspection event's."""
    code, jobs = stack.get(f"/api/lines/{line_id}/jobs?workOrderId={order_id}&limit=500", token)
    assert code == 200, jobs
    route = next(p["route"] for p in stack.get(f"/api/lines/{line_id}/products", token)[1]["items"]
                 if p["id"] == ORDERS[line_id][0])
    kinds = {e["id"]: e["kind"] for e in stack.get(f"/api/lines/{line_id}/equipment", token)[1]["items"]}
    verdicts = {e["payload"]["id"]: e["payload"]["context"]["inspection"]["pass"] for e in events
                if e["type"] == "JobContextChanged" and "inspection" in (e["payload"].get("context") or {})}
    serials = set()
    for job in jobs["items"]:
        assert job["status"] in ("COMPLETED", "SCRAPPED"), job
        code, found = stack.get(f"/api/plant/pieces?serial={quote(job['serial'])}", token)
        assert code == 200 and [(p["lineId"], p["jobId"]) for p in found["items"]] == [(line_id, job["id"])], found
        code, piece = stack.get(f"/api/lines/{line_id}/pieces/{quote(job['serial'])}", token)
        assert code == 200 and piece["status"] == job["status"], piece
        done = [s for s in piece["steps"] if s["result"] != "ABORTED"]
        assert [s["stepIndex"] for s in done] == list(range(len(done)))
        for s, step in zip(done, route, strict=False):
            assert s["kind"] == step.get("equipmentKind", step["op"]), (s, step)
            if "equipmentKind" in step:
                assert kinds[s["equipmentId"]] == step["equipmentKind"] and s["slotNo"] >= 1, s
        times = [t for s in piece["steps"] for t in (s["startedAt"], s["endedAt"])]
        assert times == sorted(times) and piece["createdAt"] <= times[0] and times[-1] <= piece["finishedAt"]
        inspected = [s for s in done if s["kind"] == "inspection"]
        if job["status"] == "COMPLETED":
            assert len(done) == len(route), piece["steps"]
        if inspected:
            assert inspected[-1]["result"] == {True: "PASS", False: "FAIL"}[verdicts[job["id"]]]
        serials.add(job["serial"])
    return serials
