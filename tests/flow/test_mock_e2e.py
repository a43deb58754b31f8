"""The seed's Mock E2E: work orders run to the end through the real services
and the simulator (Modbus and OPC UA), and the log proves the line was never overfilled."""

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from shared import production_stats as ps
from shared.config import load_settings
from shared.layout import load_layout
from tests.flow.conftest import SIM_SPEED, TRANSPORT_PROTOCOL
from tests.flow.invariants import assert_line_clear, replay


@TRANSPORT_PROTOCOL
def test_an_order_of_bracket_a_completes_with_scrap_counted_exactly(line):
    quantity = 20
    order = line.order("BRACKET-A", quantity)
    assert line.wait_finished(order["id"]) == "COMPLETED"
    done = line.row("SELECT * FROM work_order WHERE id = :id", id=order["id"])
    assert done.completed_qty + done.scrapped_qty == quantity
    assert done.scrapped_qty > 0  # scrap_rate 0.25 with this seed: the scrap path ran
    jobs = line.rows("SELECT status, step_index, context FROM job WHERE work_order_id = :o", o=order["id"])
    statuses = Counter(j.status for j in jobs)
    assert statuses == {"COMPLETED": done.completed_qty, "SCRAPPED": done.scrapped_qty}
    for j in jobs:  # completed pieces went through every step; scrapped ones failed inspection
        if j.status == "COMPLETED":
            assert j.step_index == 5 and j.context["barcode"] and j.context["markedText"]
            assert j.context["inspection"]["pass"] is True
        else:
            assert j.context["inspection"]["pass"] is False and j.step_index == 3
    line.wait_idle()
    assert_line_clear(line.engine)
    assert line.plc_buffer() == [False] * 8  # the finished pieces left the cell
    assert line.rows("SELECT * FROM alarm") == []  # nothing unexpected on the way
    assert replay(line.engine) > quantity
    # every piece was washed exactly once (how pieces group into batches depends on
    # timing; batch rules are pinned down by tests/scheduler)
    starts = line.rows("SELECT params FROM task WHERE kind = 'START_MACHINE' AND equipment_id = 'WASH1'")
    assert sum(len(t.params["jobs"]) for t in starts) == quantity
    _figures_agree_with_the_order(line, done, batches=len(starts))


def _figures_agree_with_the_order(line, order, batches):
    """/api/stats over the order's run counts what the work order counts."""
    window = ps.Window(order.started_at - timedelta(seconds=1), order.finished_at + timedelta(seconds=1),
                       now=datetime.now(UTC))
    with line.engine.connect() as conn:
        figures = ps.production_figures(conn, load_layout(load_settings({}).line_file), window,
                                        ideal_scale=SIM_SPEED)
        timeline = ps.timeline(conn, window)["items"]
    assert (figures["line"]["completed"], figures["line"]["scrapped"]) == \
        (order.completed_qty, order.scrapped_qty)
    by_id = {e["id"]: e for e in figures["equipment"]}
    quantity = order.quantity
    assert by_id["MC1"]["cycles"] + by_id["MC2"]["cycles"] == quantity  # each piece machined once
    assert by_id["WASH1"]["cycles"] == batches
    assert by_id["INSP1"]["cycles"] == quantity
    assert by_id["INSP1"]["quality"] == round(order.completed_qty / quantity, 4)
    for e in figures["equipment"]:  # (a machining centre may have had nothing to do)
        assert e["availability"] == 1.0, e
        if e["cycles"]:
            assert 0 < e["utilization"] <= 1 and 0 < e["performance"] <= 1, e
            assert e["meanCycleSeconds"] > 0, e
    for equipment_id in by_id:  # ordered, touching, never overlapping
        mine = [i for i in timeline if i["equipmentId"] == equipment_id]
        assert mine and all(a["to"] == b["from"] for a, b in zip(mine, mine[1:], strict=False)), mine
        if by_id[equipment_id]["cycles"]:
            assert {i["state"] for i in mine} >= {"PROCESSING", "IDLE"}


# Priority is the scheduler's, whatever carries the messages or speaks to the PLC
# (tests/scheduler pins its rules down): one run, on the default transport and Modbus
# (the cheaper simulator: an order over OPC UA is the test above's rabbitmq-opcua run).
@pytest.mark.parametrize("protocol", ["modbus"])
def test_two_orders_at_once_the_urgent_one_goes_first(line):
    relaxed = line.order("SHAFT-B", 12, priority=5)
    urgent = line.order("BRACKET-A", 6, priority=0)
    assert line.wait_finished(urgent["id"]) == "COMPLETED"
    assert line.wait_finished(relaxed["id"]) == "COMPLETED"
    for order, quantity in ((relaxed, 12), (urgent, 6)):
        row = line.row("SELECT * FROM work_order WHERE id = :id", id=order["id"])
        assert row.completed_qty + row.scrapped_qty == quantity
    line.wait_idle()
    assert_line_clear(line.engine)
    assert line.plc_buffer() == [False] * 8
    replay(line.engine)
    # Priority: the refills that followed the start took the urgent order's pieces
    # first, every one of them before any further piece of the relaxed order.
    refilled = [r.work_order_id for r in line.rows(
        "SELECT work_order_id FROM task WHERE kind = 'DOCK_TO_BUFFER' ORDER BY id")]
    after_urgent_started = refilled[refilled.index(urgent["id"]):]
    last_urgent = max(i for i, o in enumerate(after_urgent_started) if o == urgent["id"])
    assert relaxed["id"] not in after_urgent_started[:last_urgent]
