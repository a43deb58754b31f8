"""The scheduler drives whole orders to the end on a tiny in-memory line
model (actions take effect at once, machines finish one at a time): no
deadlock, and the buffer and slot invariants hold after every round. The
real flow through the loop and the simulator is the integration's test; this
one checks the scheduling rules alone compose into a complete flow."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from services.line_controller.scheduler import (
    EquipmentView,
    JobView,
    Load,
    Mark,
    OrderView,
    Refill,
    Scan,
    SlotView,
    StartMachine,
    Swap,
    SystemState,
    Unload,
    default_scheduler,
)

from .builders import BRACKET, MACHINING, T0, Step

TERMINAL = ("COMPLETED", "SCRAPPED")
LAYOUT = (  # id, kind, slots, batch
    ("MC1", "machining", 2, False),
    ("MC2", "machining", 2, False),
    ("WASH1", "washing", 4, True),
    ("INSP1", "inspection", 1, False),
)


class MiniLine:
    def __init__(self, orders, quantities, rng):
        self.rng = rng
        self.orders = orders  # id -> OrderView
        self.jobs = {}
        for order in orders.values():
            for _ in range(quantities[order.id]):
                jid = len(self.jobs) + 1
                self.jobs[jid] = {"order": order.id, "status": "PENDING", "pos": "ON_DOCK",
                                  "ref": None, "temp": None, "step": 0}
        self.equipment = {eid: {"kind": k, "batch": b, "status": "IDLE",
                                "slots": {n: ["EMPTY", None] for n in range(1, s + 1)}}
                          for eid, k, s, b in LAYOUT}
        self.running = []  # (equipment id, slot no) whose cycle runs, in start order

    def state(self):
        jobs = tuple(
            JobView(id=jid, order_id=j["order"], seq_no=jid, status=j["status"], position_type=j["pos"],
                    position_ref_id=j["ref"], temp_slot_no=j["temp"], step_index=j["step"],
                    created_at=T0, next_step=self._step(j))
            for jid, j in self.jobs.items() if j["status"] not in TERMINAL
        )
        equipment = tuple(
            EquipmentView(id=eid, kind=e["kind"], batch=e["batch"], status=e["status"],
                          slots=tuple(SlotView(eid, n, st_, job) for n, (st_, job) in e["slots"].items()))
            for eid, e in self.equipment.items()
        )
        return SystemState(now=T0, buffer_size=8, orders=tuple(self.orders.values()), jobs=jobs,
                           equipment=equipment)

    def _step(self, job):
        route = self.orders[job["order"]].route
        return route[job["step"]] if job["step"] < len(route) else None

    def _finish_step(self, jid, scrap=False):
        job = self.jobs[jid]
        job["step"] += 1
        job.update(pos="ON_BUFFER", ref=str(job["temp"]), status="QUEUED")
        if scrap or self._step(job) is None:
            job.update(status="SCRAPPED" if scrap else "COMPLETED", pos="OUT", ref=None, temp=None)

    def apply(self, action):
        if isinstance(action, Refill):
            for a in action.assignments:
                self.jobs[a.job_id].update(status="QUEUED", pos="ON_BUFFER", ref=str(a.buffer_slot),
                                           temp=a.buffer_slot)
        elif isinstance(action, Swap):
            self.apply(action.unload)
            self.apply(action.load)
        elif isinstance(action, Unload):
            self.equipment[action.equipment_id]["slots"][action.slot_no] = ["EMPTY", None]
            step = self._step(self.jobs[action.job_id])
            self._finish_step(action.job_id, scrap=step.op == "inspect" and self.rng.random() < 0.2)
        elif isinstance(action, Load):
            self.equipment[action.equipment_id]["slots"][action.slot_no] = ["OCCUPIED", action.job_id]
            self.jobs[action.job_id].update(pos="ON_EQUIPMENT", ref=f"{action.equipment_id}:{action.slot_no}")
        elif isinstance(action, Scan | Mark):
            self._finish_step(action.job_id)
        elif isinstance(action, StartMachine):
            eq = self.equipment[action.equipment_id]
            for slot_no, jid in action.jobs:
                self.jobs[jid]["status"] = "PROCESSING"
                self.running.append((action.equipment_id, slot_no))
            if eq["batch"]:
                eq["status"] = "RUNNING"

    def machine_done(self):
        """The PLC's next MachineDone: a whole batch, or one slot."""
        eid, slot_no = self.running[0]
        eq = self.equipment[eid]
        done = [(e, n) for e, n in self.running if e == eid] if eq["batch"] else [(eid, slot_no)]
        for e, n in done:
            self.running.remove((e, n))
            eq["slots"][n][0] = "DONE"
            self.jobs[eq["slots"][n][1]]["status"] = "WAITING_UNLOAD"
        eq["status"] = "IDLE"

    def check_invariants(self):
        live = [j for j in self.jobs.values() if j["status"] not in TERMINAL]
        temps = [j["temp"] for j in live if j["temp"] is not None]
        assert len(temps) == len(set(temps)) <= 8
        assert all(1 <= t <= 8 for t in temps)
        for eid, eq in self.equipment.items():
            for n, (status, jid) in eq["slots"].items():
                assert (status == "EMPTY") == (jid is None)
                if jid is not None:
                    assert self.jobs[jid]["ref"] == f"{eid}:{n}"
        on_equipment = [j["ref"] for j in live if j["pos"] == "ON_EQUIPMENT"]
        assert len(on_equipment) == len(set(on_equipment))


@settings(max_examples=25, deadline=None)
@given(
    quantities=st.lists(st.integers(1, 25), min_size=1, max_size=3),
    priorities=st.lists(st.integers(0, 9), min_size=3, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_orders_run_to_the_end_without_breaking_invariants(quantities, priorities, seed):
    routes = (BRACKET, MACHINING, (Step("process", "washing"), Step("inspect", "inspection")))
    orders = {
        n: OrderView(id=n, status="RUNNING", priority=priorities[n - 1], created_at=T0,
                     route=routes[n - 1])
        for n in range(1, len(quantities) + 1)
    }
    line = MiniLine(orders, dict(enumerate(quantities, start=1)), random.Random(seed))
    scheduler = default_scheduler()

    for _ in range(5000):
        chosen = scheduler.choose(line.state())
        if chosen:
            for action in chosen:
                line.apply(action)
        elif line.running:
            line.machine_done()
        else:
            break
        line.check_invariants()

    statuses = [j["status"] for j in line.jobs.values()]
    assert all(s in TERMINAL for s in statuses), "the line stalled"
    assert len(statuses) == sum(quantities)
    assert all(st_ == "EMPTY" for e in line.equipment.values() for st_, _ in e["slots"].values())
    assert all(j["temp"] is None for j in line.jobs.values())
