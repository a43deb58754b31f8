"""Killing the stack's processes at chosen moments (tests/ops crash tests)."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager

from nameko.standalone.rpc import ClusterRpcProxy
from sqlalchemy import create_engine, text

from tests.ops.invariants import line_invariants
from tests.support.waiting import wait_for

CARRYING = ("BUFFER_TO_EQUIPMENT", "EQUIPMENT_TO_BUFFER", "SWAP")


class Line:
    """Reads the stack's database directly, and asks the hardware service what it
    holds: the moment to kill at."""

    def __init__(self, url, amqp_uri):
        self.engine = create_engine(url, pool_size=1)
        self.amqp_uri = amqp_uri
        self._proxy = self._rpc = None  # one RPC proxy for every look: a look is a round trip, not a set-up

    def _known_by_hardware(self) -> dict[str, set[str]] | None:
        """The correlation ids the hardware service holds (``open``) and has
        answered (``answered``); None while it is restarting."""
        try:
            if self._proxy is None:
                self._proxy = ClusterRpcProxy({"AMQP_URI": self.amqp_uri, "serializer": "json"}, timeout=5)
                self._rpc = self._proxy.start()
            known = self._rpc.hardware.known_actions()
            return {"open": set(known["open"]), "answered": set(known["answered"])}
        except Exception:  # noqa: BLE001 - restarting: look again, on a fresh proxy
            self._drop_proxy()
            return None

    def _held_by_hardware(self) -> set[str] | None:
        known = self._known_by_hardware()
        return None if known is None else known["open"]

    def _drop_proxy(self) -> None:
        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            try:
                proxy.stop()
            except Exception:  # noqa: BLE001 - a broken proxy: nothing to keep
                pass

    def close(self) -> None:
        self._drop_proxy()
        self.engine.dispose()

    def _running(self, kinds) -> list[int]:
        with self.engine.connect() as c:
            return c.execute(text("SELECT id FROM task WHERE status = 'RUNNING' AND kind = ANY(:k) "
                                  "ORDER BY id"), {"k": list(kinds)}).scalars().all()

    def held_task(self, kinds, every=False):
        """A task RUNNING in the DB that the hardware service has accepted and not
        answered. ``every``: and the hardware knows every other RUNNING task of
        ``kinds`` (holds it, or has answered it: its result is on its way), so a
        line_controller that restarts now finds nothing to ask about.

        The hardware is asked first and the DB read after: a task answered and
        recorded in between is simply gone from both, where the other order
        would miss every moment whose look straddles a hand-over."""
        known = self._known_by_hardware()
        if known is None:
            return None
        rows = self._running(kinds)
        if every and not all(str(task_id) in known["open"] | known["answered"] for task_id in rows):
            return None
        return next((task_id for task_id in rows if str(task_id) in known["open"]), None)

    def held_robot_tasks(self, kinds, at_least=2):
        """The RUNNING tasks of ``kinds`` when the hardware holds at least ``at_least``
        of them (one executing, the rest queued behind it), else None."""
        with self.engine.connect() as c:
            rows = c.execute(text("SELECT id FROM task WHERE status = 'RUNNING' AND kind = ANY(:k)"),
                             {"k": list(kinds)}).scalars().all()
        held = self._held_by_hardware() if len(rows) >= at_least else None
        if held is None:
            return None
        ids = [t for t in rows if str(t) in held]
        return ids if len(ids) >= at_least else None

    def running_machine(self):
        with self.engine.connect() as c:
            return c.execute(text("SELECT id FROM equipment WHERE status = 'RUNNING' LIMIT 1")).scalar()

    def task(self, task_id):
        with self.engine.connect() as c:
            return c.execute(text("SELECT * FROM task WHERE id = :id"), {"id": task_id}).first()

    def actions_about(self, task_id):
        with self.engine.connect() as c:
            return c.execute(text("SELECT * FROM manual_action WHERE (context->>'taskId')::int = :id"),
                             {"id": task_id}).fetchall()

    def open_tasks(self):
        with self.engine.connect() as c:
            return c.execute(text("SELECT count(*) FROM task WHERE status IN ('PENDING', 'RUNNING')")).scalar()


def kill(stack, name, moment, what, sig=signal.SIGKILL):
    """``kill -9`` (or ``sig``) process ``name`` as soon as ``moment()`` is true, and
    wait until its successor is up and the stack is ready again."""
    found = wait_for(moment, 90, 0.01, what, steady=True)
    pid = stack.process(name)
    os.kill(pid, sig)
    mark = len(stack.lines)
    stack.wait_line(f"{name} exited", after=mark)
    wait_for(lambda: stack.process(name) not in (None, pid), 60, 0.05, f"{name} restarted")
    stack.wait_ready(120)
    return found, mark


def line_up(stack_factory, sim_speed: float, protocol: str = "modbus", extra_env: dict | None = None):
    """``linectl up`` on the simulator at ``sim_speed``, serving ``protocol``
    (LINECTL_SIM_PROTOCOL; ``extra_env``: more settings), once ready: the stack, an
    operator's token, and its Line."""
    stack = stack_factory(sim_speed=sim_speed,
                          extra_env={"LINECTL_SIM_PROTOCOL": protocol, **(extra_env or {})}).up()
    stack.wait_line("linectl: ready", 180)
    assert ("OPC UA on opc.tcp://" if protocol == "opcua" else "Modbus TCP on") in stack.output()
    return stack, stack.token("operator"), Line(stack.database_url(), stack.amqp_uri())


def start_order(stack, token, product: str, quantity: int) -> dict:
    """A work order created and started through the API, as the operator."""
    code, order = stack.request("POST", "/api/work-orders", {"productId": product, "quantity": quantity}, token)
    assert code == 201, order
    assert stack.request("POST", f"/api/work-orders/{order['id']}/start", {}, token)[0] == 200
    return order


def completes_exactly(stack, token, line, order: dict, quantity: int, answer=lambda: None,
                      timeout: float = 180.0) -> dict:
    """The order completes (``answer()`` the operator's questions while waiting) and
    every take-out is done, with exact counts, every invariant holding and no
    question left open → the order as the API shows it."""
    def finished():
        answer()
        return stack.get(f"/api/work-orders/{order['id']}", token)[1].get("status") == "COMPLETED"
    wait_for(finished, timeout, 0.5, f"work order {order['id']} to complete")
    wait_for(lambda: line.open_tasks() == 0, 60, 0.1, "every take-out done")
    done = stack.get(f"/api/work-orders/{order['id']}", token)[1]
    assert done["completedQty"] + done["scrappedQty"] == quantity, done
    assert line_invariants(stack.database_url(), order["id"]) == []
    code, actions = stack.get("/api/manual-actions?status=OPEN&limit=500", token)
    assert code == 200 and actions["items"] == [], actions
    return done


@contextmanager
def reported(stack, line):
    """On a failure, what the processes said and the line's state, for the
    report; the line's engine is closed either way."""
    try:
        yield
    except BaseException:
        print(stack.output()[-30000:])
        print(dump_line(stack.database_url()))
        raise
    finally:
        line.close()


def dump_line(url) -> str:
    """The line's state for a failure report: live jobs, open tasks, every manual action."""
    engine = create_engine(url, pool_size=1)
    out = []
    try:
        with engine.connect() as c:
            for title, sql in (
                ("orders", "SELECT id, status, completed_qty, scrapped_qty, quantity FROM work_order"),
                ("live jobs", "SELECT id, status, held_status, position_type, position_ref_id, temp_slot_no,"
                              " step_index, error_code FROM job WHERE status NOT IN"
                              " ('COMPLETED', 'SCRAPPED', 'CANCELLED') ORDER BY id"),
                ("tasks not succeeded", "SELECT id, kind, status, job_id, equipment_id, slot_no, error_code"
                                        " FROM task WHERE status <> 'SUCCEEDED' ORDER BY id"),
                ("manual actions", "SELECT id, kind, status, resolution, job_id, equipment_id, context"
                                   " FROM manual_action ORDER BY id"),
                ("slots", "SELECT equipment_id, slot_no, status, current_job_id FROM equipment_slot"
                          " WHERE status <> 'EMPTY'"),
                ("equipment", "SELECT id, status FROM equipment"),
                ("dock", "SELECT * FROM dock"),
            ):
                out.append(f"-- {title}")
                out += [str(tuple(r)) for r in c.execute(text(sql))]
    except Exception as exc:  # noqa: BLE001 - a report, best effort
        out.append(f"(could not read the line: {exc})")
    finally:
        engine.dispose()
    return "\n".join(out)

