"""The database fails over mid-order and nothing is lost (PRODUCT.md, "Database
failover"; issue 40): the services, the gateway and the test's own engine name a
primary and its synchronous standby in one multi-host URL; the primary's server
is killed (``kill -9``) while the line runs an order, and the standby promoted,
as an HA manager would. Every process finds the new primary by itself (none
restarts), the gateway answers 503 meanwhile (never 500 or 409), the order
completes with exact counts, the event log stays gapless, no piece moved twice,
and nobody is asked anything. With an asynchronous standby that lost an unload
(issue 56), the line asks once where the piece is, and nothing else."""

from __future__ import annotations

import time
from collections import Counter

import eventlet
import pytest
from nameko.standalone.rpc import ServiceRpcProxy

from services.hardware import plc as P
from services.stack.migrate import upgrade
from shared import events as ev
from tests.flow.invariants import assert_line_clear, replay
from tests.flow.stack import AUTH, simulator_cell
from tests.support.replica_pair import ReplicaPair
from tests.support.waiting import wait_for


@pytest.fixture
def replica_pair(request):
    """The pair, its standby synchronous unless a test parametrizes it ``"asynchronous"``."""
    pair = ReplicaPair(synchronous=getattr(request, "param", "synchronous") == "synchronous").start()
    yield pair
    pair.stop()


@pytest.fixture
def db_url(replica_pair):
    """The line's database on the pair, at the migrations' head (overrides the suite's)."""
    upgrade(replica_pair.url)
    return replica_pair.url


@pytest.fixture
def floor(floor_on, layout):
    with floor_on(simulator_cell("modbus", layout)) as floor:
        yield floor


class Caller:
    """An operator's client calling the gateway all along (a green thread): what it was answered."""

    def __init__(self, http):
        self.http, self.answers, self.running = http, [], True
        self.thread = eventlet.spawn(self._run)

    def _run(self):
        n = 0
        while self.running:
            n += 1
            for method, path, body in (("get", "/readyz", None), ("get", "/api/work-orders", None),
                                       ("post", "/api/work-orders", {"productId": "SHAFT-B", "quantity": 1,
                                                                    "code": f"DURING-{n}"})):
                answer = getattr(self.http, method)(path, headers=AUTH, json=body)
                self.answers.append((method, path, answer.status_code))
            eventlet.sleep(0.05)

    def stop(self):
        self.running = False
        self.thread.wait()


@pytest.fixture(params=["pgsql", "rabbitmq"])
def transport(request):
    """pgsql://, which fails over with the database; RabbitMQ, where the database alone does."""
    return request.param


def test_a_failover_mid_order_loses_nothing_and_restarts_nobody(floor, replica_pair, nameko_config):
    quantity = 6
    order = floor.order("SHAFT-B", quantity)
    wait_for(lambda: floor.row("SELECT count(*) AS n FROM job WHERE work_order_id = :o AND status = 'COMPLETED'",
                               o=order["id"]).n >= 2, 60, 0.05, "two pieces done")
    hardware_before = floor.hardware.known_actions()["instanceId"]
    handled_before, duplicates_before = (floor.proxy.status()[k] for k in ("handledTotal", "duplicatesTotal"))
    seq_before = floor.row("SELECT max(seq) AS s FROM event_log").s
    caller = Caller(floor.http)
    died = time.monotonic()
    replica_pair.fail_over()
    wait_for(lambda: floor.row("SELECT max(seq) AS s FROM event_log").s > seq_before, 60, 0.02,
             "the first event after the failover")
    first_event = time.monotonic() - died
    readiness = []
    wait_for(lambda: readiness.append(floor.http.get("/readyz")) or readiness[-1].status_code == 200, 60, 0.02,
             lambda: f"/readyz 200, not {readiness[-1].get_json()}")
    ready = time.monotonic() - died
    print(f"failover: first event after {first_event:.2f} s, /readyz 200 after {ready:.2f} s")

    assert floor.wait_finished(order["id"], timeout=120) == "COMPLETED"
    caller.stop()
    statuses = Counter(status for _, _, status in caller.answers)
    print(f"failover: the gateway answered {dict(statuses)}")
    assert set(statuses) <= {200, 201, 503}, caller.answers  # never 500, never 409
    done = floor.row("SELECT * FROM work_order WHERE id = :id", id=order["id"])
    assert done.completed_qty + done.scrapped_qty == quantity
    jobs = floor.rows("SELECT status FROM job WHERE work_order_id = :o", o=order["id"])
    assert Counter(j.status for j in jobs) == {k: v for k, v in (("COMPLETED", done.completed_qty),
                                                                  ("SCRAPPED", done.scrapped_qty)) if v}
    floor.wait_idle()
    assert_line_clear(floor.engine)
    replay(floor.engine)  # seq gapless; every move's piece where the log says, none moved twice
    # every order created while the gateway answered 201 is there once
    created = sum(1 for method, _, status in caller.answers if method == "post" and status == 201)
    assert floor.row("SELECT count(*) AS n FROM work_order WHERE code LIKE 'DURING-%'").n >= created
    assert floor.row("SELECT inet_server_port() AS port").port == replica_pair.standby_port
    # nobody was asked anything: a failover is no fault of the line
    assert floor.rows("SELECT kind, text FROM manual_action") == []
    assert floor.rows("SELECT code FROM alarm") == []
    # the very same processes: the hardware instance, and a loop that kept counting
    # (asked through new clients: one that met the dead server reports that, as on RabbitMQ)
    with ServiceRpcProxy(ev.HARDWARE, nameko_config, timeout=10) as hardware, \
            ServiceRpcProxy(ev.LINE_CONTROLLER, nameko_config, timeout=10) as line_controller:
        assert hardware.known_actions()["instanceId"] == hardware_before
        status = line_controller.status()
        assert status["handledTotal"] > handled_before
    print(f"failover: {status['duplicatesTotal'] - duplicates_before} handled message(s) redelivered")



# -- an asynchronous standby (issue 56) -------------------------------------------------

STATION = "INSP1"


def _hold(pair, statement, *params):
    """A transaction on the primary that takes the lock ``statement`` takes and keeps
    it until its connection closes: the line's transactions that need it wait."""
    holder = pair.connect(pair.primary_port, pair.database)
    holder.cursor().execute(statement, params)
    return holder


def _robot_commands(floor):
    """The command codes the simulator's robot executed, in order."""
    return [code for _action, code, _start, _end in floor.cell.simulator.model.robot_log]


@pytest.mark.parametrize("transport", ["pgsql"])
@pytest.mark.parametrize("replica_pair", ["asynchronous"], indirect=True)
def test_an_unload_an_asynchronous_standby_lost_is_asked_about_once(floor, replica_pair, nameko_config):
    """The standby streams asynchronously and hears nothing more once INSP1's cycle
    has ended (job WAITING_UNLOAD, slot DONE). On the primary the robot then unloads
    the piece onto its buffer slot, and the primary dies before the line sends
    anything else (the piece's way out waits for a lock the test holds). Promoted, the
    standby has the piece in INSP1, whose OCCUPIED the PLC shows empty: the line asks
    once where it is and sends nothing there; answered truthfully (on its buffer
    slot, as the PLC shows), the order completes exactly, the piece moved once."""
    pair = replica_pair
    floor.cell.hang(STATION)  # the cycle ends when the test clears it
    order = floor.order("SHAFT-B", 1)
    (job_id,) = floor.processing_on(STATION, hold=False)
    floor.wait_idle()  # the start's result recorded too: only the cycle's end is to come
    holders = []
    try:
        # No task can start (the unload waits) while the cycle's end is recorded.
        holders.append(_hold(pair, "LOCK TABLE task IN SHARE MODE"))
        floor.cell.clear()
        floor._wait(lambda: pair.blocked_by(holders[0]) and floor.row(
            "SELECT status FROM job WHERE id = :j", j=job_id).status == "WAITING_UNLOAD", 30,
            "the cycle's end recorded and the unload waiting")
        pair.cut_standby()  # the standby has the cycle's end; nothing after it
        # The unload goes ahead; the piece's way out (its order's count) waits.
        holders.append(_hold(pair, "SELECT id FROM work_order WHERE id = %s FOR NO KEY UPDATE", order["id"]))
        holders.pop(0).close()
        floor._wait(lambda: pair.blocked_by(holders[0]), 30, "the unload's result waiting")
        robot_before = _robot_commands(floor)
        assert robot_before[-1] == P.CMD_EQUIPMENT_TO_BUFFER
        pair.fail_over()
    finally:
        for holder in holders:
            holder.close()

    question = floor.open_action("RECOVERY_MACHINE_PIECE_MISSING")
    job = floor.row("SELECT * FROM job WHERE id = :j", j=job_id)
    # the standby's records: the piece waits for its unload in INSP1 (held now); no unload was started
    assert (job.status, job.held_status, job.position_ref_id) == ("SUSPENDED", "WAITING_UNLOAD", f"{STATION}:1")
    assert floor.row("SELECT status, current_job_id FROM equipment_slot WHERE equipment_id = :e",
                     e=STATION) == ("DONE", job_id)
    assert floor.rows("SELECT id FROM task WHERE equipment_id = :e AND kind = :k", e=STATION,
                      k=ev.EQUIPMENT_TO_BUFFER) == []
    # one question (the check's own: no robot tried the empty slot), and nothing else open
    assert [(a.kind, a.job_id, a.equipment_id) for a in floor.rows("SELECT * FROM manual_action")] == \
        [("RECOVERY_MACHINE_PIECE_MISSING", job_id, STATION)]
    assert "case" not in question["facts"] and question["facts"]["bufferSlot"] == job.temp_slot_no
    assert question["choices"] == ["CONFIRM", "PIECE_UNLOADED", "PIECE_REMOVED", "SCRAP"]
    # A client that met the dead server reports that (as the synchronous test says): a new one.
    with ServiceRpcProxy(ev.HARDWARE, nameko_config, timeout=30) as hardware:
        floor.hardware = hardware
        plc = hardware.plc_state()
        (slot,) = next(m for m in plc["equipment"] if m["id"] == STATION)["slots"]
        assert not slot["occupied"] and plc["buffer"][job.temp_slot_no - 1]["occupied"]  # where the piece is
        # as the operator does: again while the gateway answers 503 (a client of its
        # pool met the dead server); then it is taken (409: an earlier try was)
        floor._wait(lambda: floor.answer(question, "PIECE_UNLOADED").status_code != 503, 30, "the answer taken")
        done = floor.finished_exactly(order["id"], 1)
    assert (done.completed_qty, done.scrapped_qty) == (1, 0)
    assert floor.row("SELECT inet_server_port() AS port").port == pair.standby_port
    # the unload counted once: the piece's only move since is its way out of the cell
    assert _robot_commands(floor)[len(robot_before):] == [P.CMD_BUFFER_TO_DOCK]
    assert [tuple(a) for a in floor.rows("SELECT kind, resolution FROM manual_action")] == \
        [("RECOVERY_MACHINE_PIECE_MISSING", "PIECE_UNLOADED")]
    assert [tuple(a) for a in floor.rows("SELECT code, status FROM alarm")] == \
        [("RECOVERY_MACHINE_PIECE_MISSING", "CLEARED")]
    assert floor.rows("SELECT id FROM task WHERE status <> 'SUCCEEDED'") == []
