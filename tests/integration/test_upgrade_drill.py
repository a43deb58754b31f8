"""The upgrade drill: a database at the previous Alembic head, holding an order
mid-run, AI jobs in every state, transport messages and events, migrates to
head with every row intact and the line runs on; and a migration that waits on
a lock another session holds gives up after its lock_timeout.

The line's rows come from the real services (the line_controller and the
hardware service on the Modbus simulator), stopped mid-order at head and then
taken down to the previous head; the schema's downgrade keeps every row the
older schema can hold. The rows only the older schema knows nothing of are
made at the previous head itself, with SQL, as the last release wrote them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import psycopg2
from nameko.standalone.rpc import ServiceRpcProxy
from sqlalchemy import inspect, select, text
from sqlalchemy.orm import Session

from services.hardware.service import HardwareService
from services.hardware.sim.model import SimOptions
from services.hardware.sim.server import LineSimulator
from services.line_controller.service import LineControllerService
from services.stack.migrate import current_heads, downgrade, previous_head, upgrade
from shared import events as ev
from shared.config import Settings
from shared.db.models import Base
from shared.layout import load_layout
from tests.ops.crashing import dump_line
from tests.ops.invariants import line_invariants
from tests.ops.operator import answer_for
from tests.support.ports import free_port
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
AI_STATES = ("pending", "locked", "running", "succeeded", "failed", "cancelled", "expired")
QUANTITY = 8


@contextmanager
def line_services(container_factory, nameko_config, plc_port):
    """The hardware service and the line_controller on the simulator; the proxies."""
    config = {**nameko_config, "LINECTL_PLC_ADDRESS": f"127.0.0.1:{plc_port}",
              "LINECTL_HW_ACTION_TIMEOUT": 20.0, "LINECTL_HW_MODBUS_TIMEOUT": 5.0, "LINECTL_STEP_TIMEOUT": 30.0}
    containers = [container_factory(HardwareService, config), container_factory(LineControllerService, config)]
    for container in containers:
        container.start()
    try:
        with ServiceRpcProxy(ev.HARDWARE, config, timeout=30) as hw, \
                ServiceRpcProxy(ev.LINE_CONTROLLER, config, timeout=60) as controller:
            wait_for(lambda: hw.plc_state()["connected"], 30, 0.1, "the PLC")
            yield controller, hw
    finally:
        for container in containers:  # a clean stop, as an upgrade's restart does
            container.stop()


def command(controller, type_, payload):
    reply = controller.command(type_, payload, "upgrade-drill", wait_seconds=30)
    assert reply["status"] == "HANDLED", reply
    return reply["result"]


def answer_recovery(engine, controller, hw) -> None:
    """The stop for the upgrade may have cut an action short: answer the start-up
    checks' questions from the cell, as tests/ops/operator.py does over HTTP."""
    with engine.connect() as c:
        actions = c.execute(text("SELECT id, kind, equipment_id, context, facts FROM manual_action "
                                 "WHERE status = 'OPEN' AND kind LIKE 'RECOVERY%'")).fetchall()
        if not actions:
            return
        plc = hw.plc_state()
        if plc.get("robot", {}).get("state") == "BUSY":
            return  # a person waits for the robot to stop; so do we (the next poll)
        for a in actions:
            task_id = (a.context or {}).get("taskId")
            task = task_id and c.execute(text("SELECT kind, params, equipment_id AS \"equipmentId\", "
                                              "slot_no AS \"slotNo\" FROM task WHERE id = :t"),
                                         {"t": task_id}).mappings().first()
            choice = answer_for({"kind": a.kind, "equipmentId": a.equipment_id, "context": a.context,
                                 "facts": a.facts},
                                dict(task) if task else None, plc)
            controller.command("ResolveManualAction", {"manualActionId": a.id, "resolution": choice},
                               "upgrade-drill", wait_seconds=30)


def rows_at_previous_head(conn) -> None:
    """What the previous release wrote beside the line: AI jobs in every state with
    their transitions and results, an alarm and an answered manual action, audit
    rows, a message waiting in a durable queue, a dead letter, a consumer that died."""
    conn.execute(text("INSERT INTO ai_snapshot (id, user_id, target_type, target_id, data) "
                      "VALUES ('snap-1', 'u1', 'user', 't1', '{\"scores\": [1, 2]}')"))
    conn.execute(text("INSERT INTO ai_credential (id, user_id, encrypted_key) VALUES ('cred-1', 'u1', 'x')"))
    for n, state in enumerate(AI_STATES):
        job_id = f"00000000-0000-0000-0000-00000000000{n}"
        conn.execute(text(
            "INSERT INTO ai_runtime_job (id, user_id, job_type, target_type, target_id, status, snapshot_id,"
            " attempt_no, output_schema_version, cancel_requested) VALUES (:id, 'u1', 'quiz_generation', 'user',"
            " 't1', :s, 'snap-1', :a, '1', :c)"),
            {"id": job_id, "s": state, "a": 0 if state == "pending" else 1, "c": state == "cancelled"})
        conn.execute(text("INSERT INTO ai_job_transition (job_id, from_status, to_status) "
                          "VALUES (:id, 'pending', :s)"), {"id": job_id, "s": state})
        if state in ("succeeded", "failed"):
            conn.execute(text(
                "INSERT INTO ai_runtime_result (id, job_id, attempt_no, idempotency_key, runtime_instance_id,"
                " status, output, error_code) VALUES (:r, :id, 1, :k, 'rt-1', :s, :o, :e)"),
                {"r": f"res-{n}", "id": job_id, "k": f"{job_id}:1:h", "s": state,
                 "o": '{"questions": []}' if state == "succeeded" else None,
                 "e": "MODEL_ERROR" if state == "failed" else None})
    conn.execute(text("INSERT INTO alarm (code, status, message) VALUES ('EQUIPMENT_FAULT', 'ACKNOWLEDGED', "
                      "'MC2 faulted (drill)')"))
    conn.execute(text("INSERT INTO manual_action (kind, status, text, choices, resolution) VALUES "
                      "('EQUIPMENT_FAULT', 'RESOLVED', 'MC2 faulted (drill)', '[\"RETRY\"]', 'RETRY')"))
    conn.execute(text("INSERT INTO audit_log (actor, action, target_type, outcome) "
                      "VALUES ('op1', 'upgrade-drill', 'line', 'ok')"))
    conn.execute(text("INSERT INTO mq_queue (name, durable, auto_delete, exclusive) "
                      "VALUES ('upgrade-drill', true, false, false) ON CONFLICT DO NOTHING"))
    conn.execute(text("INSERT INTO mq_message (queue, payload) VALUES ('upgrade-drill', '{\"body\": 1}')"))
    conn.execute(text("INSERT INTO mq_consumer (queue, backend_pid, tag, backend_started) "
                      "VALUES ('upgrade-drill', 1, 'gone', now() - interval '1 day')"))
    conn.execute(text("INSERT INTO mq_dead_letter (id, queue, payload, delivery_count) "
                      "VALUES (1, 'upgrade-drill', '{}', 5)"))
    conn.execute(text("INSERT INTO people_user (name, role, lines, password_hash) "
                      "VALUES ('op1', 'operator', '[\"cell-a\"]', 'x')"))
    conn.execute(text("INSERT INTO people_session (id, user_name, role, source, csrf_token, expires_at) "
                      "VALUES ('s1', 'op1', 'operator', 'local', 'c', now() + interval '1 hour')"))
    conn.execute(text("INSERT INTO people_sign_in_failure (user_name) VALUES ('op2')"))
    conn.execute(text("INSERT INTO people_audit (actor, role, action, target_type, line_id, outcome) "
                      "VALUES ('op1', 'operator', 'SignIn', 'session', 'cell-a', 'ok')"))
    conn.execute(text("INSERT INTO uns_node (line_id, schema_name, acked_seq, bd_seq, messages) "
                      "VALUES ('demo-cell', 'public', 1, 3, 7) ON CONFLICT DO NOTHING"))


def snapshot(engine) -> dict[str, tuple[list[str], list[tuple]]]:
    """Every table's columns and rows (sorted), alembic's own table aside."""
    out = {}
    with engine.connect() as conn:
        for table in inspect(conn).get_table_names():
            if table == "alembic_version":
                continue
            columns = [c["name"] for c in inspect(conn).get_columns(table)]
            out[table] = (columns, _rows(conn, table, columns))
    return out


def _rows(conn, table, columns):
    listed = ", ".join(f'"{c}"' for c in columns)
    return sorted((tuple(r) for r in conn.execute(text(f'SELECT {listed} FROM "{table}"'))), key=repr)


def test_an_upgrade_from_the_previous_head_keeps_every_row_and_the_line_runs_on(
        db_url, engine, container_factory, nameko_config):
    previous = previous_head()
    assert previous is not None, "a single migration: nothing to upgrade from"
    layout = load_layout(Settings().line_file)
    port = free_port()
    sim = LineSimulator(layout, SimOptions(speed=1000.0, scrap_rate=0.25, seed=3, pallet_size=500,
                                           pallet_seconds=1.0), "127.0.0.1", port).start()
    try:
        # 1. The last release's line, mid-order, stopped for the upgrade.
        with line_services(container_factory, nameko_config, port) as (controller, _hw):
            order = command(controller, "CreateOrder", {"productId": "SHAFT-B", "quantity": QUANTITY})
            command(controller, "StartOrder", {"workOrderId": order["id"]})

            def mid_run():
                with engine.connect() as c:
                    r = c.execute(text(
                        "SELECT count(*) FILTER (WHERE status IN ('COMPLETED', 'SCRAPPED')) AS done,"
                        " count(*) FILTER (WHERE status IN ('QUEUED', 'MOVING', 'PROCESSING', 'WAITING_UNLOAD'))"
                        " AS busy FROM job WHERE work_order_id = :o"), {"o": order["id"]}).first()
                return r.done >= 1 and r.busy >= 1
            wait_for(mid_run, 60, 0.01, "the order mid-run", steady=True)
        downgrade(db_url, previous)
        with engine.begin() as conn:
            rows_at_previous_head(conn)
        engine.dispose()
        before = snapshot(engine)
        empty = [t for t, (_c, rows) in before.items() if not rows]
        assert empty == [], f"tables without rows at {previous}: {empty}"
        with engine.connect() as c:
            assert c.execute(text("SELECT status FROM work_order WHERE id = :o"),
                             {"o": order["id"]}).scalar() == "RUNNING"

        # 2. Up to head with `linectl migrate`: every row as it was, in the columns it had.
        with engine.connect() as c:
            last_seq = c.execute(text("SELECT max(seq) FROM event_log")).scalar()
        out = subprocess.run([sys.executable, "-m", "services.stack.cli", "migrate"], capture_output=True,
                             text=True, timeout=60, env={**os.environ, "LINECTL_DATABASE_URL": db_url})
        assert out.returncode == 0, out.stderr
        engine.dispose()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == current_heads()[0]
            for table, (columns, rows) in before.items():
                assert _rows(conn, table, columns) == rows, f"{table} changed in the upgrade"
        with Session(engine) as session:  # and the head's models read each of them
            for mapper in Base.registry.mappers:
                table = mapper.persist_selectable.name
                if table in before:
                    assert len(session.scalars(select(mapper.class_)).all()) == len(before[table][1]), table

        # 3. The line runs on: the interrupted order completes, and a new one.
        with line_services(container_factory, nameko_config, port) as (controller, hw):
            fresh = command(controller, "CreateOrder", {"productId": "BRACKET-A", "quantity": 2})
            command(controller, "StartOrder", {"workOrderId": fresh["id"]})

            def finished():
                answer_recovery(engine, controller, hw)
                with engine.connect() as c:
                    return c.execute(text("SELECT bool_and(status = 'COMPLETED') FROM work_order "
                                          "WHERE id IN (:a, :b)"), {"a": order["id"], "b": fresh["id"]}).scalar()
            try:
                wait_for(finished, 120, 0.1, "both orders complete")
            except AssertionError:
                print(dump_line(db_url))
                raise
        for order_id in (order["id"], fresh["id"]):
            assert line_invariants(db_url, order_id) == []
        # A plant of one line: its rows stayed in public, and its seq went on from where it was.
        with engine.connect() as c:
            assert c.execute(text("SELECT id, schema_name FROM plant_line")).all() == [(layout.id, "public")]
            seqs = c.execute(text("SELECT seq FROM event_log ORDER BY seq")).scalars().all()
        assert seqs[-1] > last_seq and seqs == list(range(seqs[0], seqs[-1] + 1))
    finally:
        sim.stop()


LAST_BEFORE_AN_ALTERING_MIGRATION = "0006"


def test_a_migration_waiting_on_a_lock_gives_up_after_the_lock_timeout(empty_db_url):
    """A long transaction of the running line (or a backup: pg_dump holds the same
    locks) reads every table; a migration altering one of them (0007 adds columns
    to ai_runtime_job; the newer ones only create tables of their own) fails after
    its lock_timeout and changes nothing, instead of waiting, and queueing every
    later query of that table behind its lock request."""
    previous = LAST_BEFORE_AN_ALTERING_MIGRATION
    upgrade(empty_db_url, previous)
    holder = psycopg2.connect(empty_db_url)
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            tables = ", ".join(f'"{r[0]}"' for r in cur.fetchall())
            cur.execute(f"LOCK TABLE {tables} IN ACCESS SHARE MODE")  # in a transaction until rollback
        started = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "services.stack.cli", "migrate", "--lock-timeout", "1s"],
                             env={**os.environ, "LINECTL_DATABASE_URL": empty_db_url}, cwd=REPO,
                             capture_output=True, text=True, timeout=30)
        waited = time.monotonic() - started
        assert out.returncode == 1, out.stdout + out.stderr
        assert "lock timeout" in out.stderr and "nothing was changed" in out.stderr, out.stderr
        assert waited < 20, waited
        with holder.cursor() as cur:
            cur.execute("SELECT version_num FROM alembic_version")
            assert cur.fetchone()[0] == previous
    finally:
        holder.rollback()
        holder.close()
    upgrade(empty_db_url)  # once the lock is gone, the same upgrade goes through
