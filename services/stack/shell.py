"""``linectl shell``: nameko's shell on the project's config, with helpers.

In the shell, ``n`` is nameko's helper (``n.rpc.line_controller.status()``) and
these functions are defined (see ``help(orders)`` etc.)::

    orders(status=None)      work orders, newest first
    start(order_id)          StartOrder     pause(id) / resume(id) / cancel(id)
    create(product, qty)     CreateOrder
    alarms()                 alarms not cleared (shelved ones too)
    ack(alarm_id)            acknowledge an alarm
    shelve(alarm_id, minutes, reason)   hide it from the active list for a while
    unshelve(alarm_id)       back to the active list
    stats(hours=8)           throughput, scrap and OEE per machine over the last hours
    timeline(machine, hours=1)  the machine's states over the last hours
    actions()                open manual actions
    resolve(id, choice)      ResolveManualAction
    confirm_recovery()       ConfirmRecovery for every open recovery action
    status()                 the event loop's status
    ai                       AI jobs, straight from PostgreSQL: ai.jobs(), ai.job(id),
                             ai.counts(), ai.cancel(id), ai.rerun(id), ai.revoke(user)
"""

# This file is run by nameko's shell as PYTHONSTARTUP, inside the shell's
# namespace (where ``n`` is defined); it must not rely on module globals.

import json as _json
import os as _os

from sqlalchemy import select as _select

from shared.db import models as _models
from shared.db.engine import make_engine as _make_engine
from shared.db.engine import make_sessionmaker as _make_sessionmaker

_engine = _make_engine(_os.environ["LINECTL_DATABASE_URL"], read_only=True, pool_size=1)
_Session = _make_sessionmaker(_engine)
_ACTOR = "shell:" + _os.environ.get("USER", "operator")


def _show(obj):
    print(_json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def _command(kind, **payload):
    out = n.rpc.line_controller.command(kind, payload, _ACTOR)  # noqa: F821 - n is the shell's
    _show(out)


def status():
    """The line_controller event loop's status."""
    _show(n.rpc.line_controller.status())  # noqa: F821


def orders(status=None):
    """Work orders, newest first (optionally only one status)."""
    with _Session() as s:
        q = _select(_models.WorkOrder).order_by(_models.WorkOrder.id.desc()).limit(50)
        if status:
            q = q.where(_models.WorkOrder.status == status.upper())
        for o in s.scalars(q):
            print(f"{o.id:>5} {o.code:<24} {o.product_id:<12} {o.status:<10} "
                  f"{o.completed_qty}+{o.scrapped_qty}/{o.quantity} prio {o.priority}")


def create(product_id, quantity, priority=5):
    """Create a work order."""
    _command("CreateOrder", productId=product_id, quantity=quantity, priority=priority)


def start(order_id):
    _command("StartOrder", workOrderId=order_id)


def pause(order_id):
    _command("PauseOrder", workOrderId=order_id)


def resume(order_id):
    _command("ResumeOrder", workOrderId=order_id)


def cancel(order_id):
    _command("CancelOrder", workOrderId=order_id)


def alarms():
    """Alarms not yet cleared."""
    with _Session() as s:
        q = _select(_models.Alarm).where(_models.Alarm.status != "CLEARED").order_by(_models.Alarm.id)
        for a in s.scalars(q):
            print(f"{a.id:>5} {a.status:<12} {a.severity:<8} {a.code:<24} {a.message}")


def ack(alarm_id):
    _command("AcknowledgeAlarm", alarmId=alarm_id)


def shelve(alarm_id, minutes, reason):
    """ShelveAlarm: hidden from the active list for ``minutes`` (1..1440)."""
    _command("ShelveAlarm", alarmId=alarm_id, minutes=minutes, reason=reason)


def unshelve(alarm_id):
    _command("UnshelveAlarm", alarmId=alarm_id)


def _window(hours):
    from datetime import UTC, datetime, timedelta

    from shared.production_stats import Window

    now = datetime.now(UTC)
    return Window(now - timedelta(hours=hours), now, now)


def stats(hours=8):
    """The production figures of the last ``hours`` (as GET /api/stats)."""
    from shared.config import load_settings
    from shared.layout import load_layout
    from shared.production_stats import figures_table, ideal_scale, production_figures

    settings = load_settings()
    with _engine.connect() as conn:
        figures = production_figures(conn, load_layout(settings.line_file), _window(hours),
                                     ideal_scale=ideal_scale(settings))
    print(figures_table(figures))


def timeline(machine, hours=1):
    """One machine's states over the last ``hours`` (as GET /api/stats/timeline)."""
    from shared.production_stats import timeline as _timeline
    from shared.production_stats import timeline_table

    with _engine.connect() as conn:
        print(timeline_table(_timeline(conn, _window(hours), machine)))


def actions():
    """Open manual actions with their choices."""
    with _Session() as s:
        q = _select(_models.ManualAction).where(_models.ManualAction.status == "OPEN")
        for m in s.scalars(q.order_by(_models.ManualAction.id)):
            print(f"{m.id:>5} {m.kind:<24} choices={m.choices} {m.text}")


def resolve(action_id, resolution, note=None):
    _command("ResolveManualAction", manualActionId=action_id, resolution=resolution, note=note)


def confirm_recovery(*ids):
    _command("ConfirmRecovery", **({"manualActionIds": list(ids)} if ids else {}))


def _ai_helpers():
    from services.ai_jobs.shell import AiShell
    from shared.config import load_settings

    return AiShell(load_settings())


ai = _ai_helpers()

print("linectl helpers: status() orders() create(product, qty) start(id) pause(id) resume(id) "
      "cancel(id) alarms() ack(id) shelve(id, minutes, reason) unshelve(id) stats() "
      "timeline(machine) actions() resolve(id, choice) confirm_recovery(); ai.jobs() ai.job(id) "
      "ai.counts() ai.cancel(id) ai.rerun(id)")
