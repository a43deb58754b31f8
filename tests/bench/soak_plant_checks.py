"""The end of the plant soak (tests/bench/soak_plant.py): each line's pace in the
baseline and the soak windows, what must hold per line, and the report."""

from __future__ import annotations

from datetime import datetime

from tests.bench.soak_crash import _asked, _question_texts
from tests.ops.invariants import line_invariants
from tests.ops.operator import plc_state
from tests.ops.test_plant import line_events

Window = tuple[datetime, datetime]


def up_windows(window: Window, outages: list[Window]) -> list[Window]:
    """``window`` less the PostgreSQL outages (kill → ``/readyz`` 200)."""
    parts, start = [], window[0]
    for down, up in sorted(outages):
        if up <= start or down >= window[1]:
            continue
        if down > start:
            parts.append((start, down))
        start = max(start, up)
    if start < window[1]:
        parts.append((start, window[1]))
    return parts


def finished_in(db_url: str, windows: list[Window]) -> int:
    """Jobs of the line (completed or scrapped) that finished inside ``windows``."""
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url, pool_size=1)
    try:
        with engine.connect() as c:
            return sum(c.execute(text("SELECT count(*) FROM job WHERE finished_at >= :a AND finished_at < :b"),
                                 {"a": a, "b": b}).scalar() for a, b in windows)
    finally:
        engine.dispose()


def pace(db_url: str, base: Window, soak: Window, outages: list[Window]) -> dict:
    """Pieces per minute in the baseline and in the soak while PostgreSQL was up."""
    up = up_windows(soak, outages)
    base_s = (base[1] - base[0]).total_seconds()
    soak_s = sum((b - a).total_seconds() for a, b in up)
    base_n, soak_n = finished_in(db_url, [base]), finished_in(db_url, up)
    base_ppm = base_n * 60 / base_s if base_s else 0.0
    soak_ppm = soak_n * 60 / soak_s if soak_s else 0.0
    return {"base_n": base_n, "base_s": base_s, "base": base_ppm, "soak_n": soak_n, "soak_s": soak_s,
            "soak": soak_ppm, "down_s": (soak[1] - soak[0]).total_seconds() - soak_s,
            "ratio": soak_ppm / base_ppm if base_ppm else float("nan")}


def line_orders(stack, token: str, line) -> list[dict]:
    orders, cursor = [], ""
    while True:
        code, page = stack.get(f"{line.api}/work-orders?limit=500{cursor}", token, timeout=30)
        assert code == 200, (code, page)
        orders += page["items"]
        if not page.get("nextCursor"):
            return orders
        cursor = f"&cursor={page['nextCursor']}"


def line_cell(amqp: str, line) -> str | None:
    """What the line's PLC still holds at the end (None: the cell is empty)."""
    plc = plc_state(amqp, hardware=line.hardware)
    if not plc or not plc.get("connected"):
        return "the PLC could not be read at the end"
    pieces = [f"buffer {b['slotNo']}" for b in plc["buffer"] if b["occupied"]]
    pieces += [f"{m['id']}:{s['slotNo']}" for m in plc["equipment"] for s in m["slots"] if s["occupied"]]
    return f"pieces left in the cell: {', '.join(pieces)}" if pieces else None


def line_broken(soak, line) -> list[str]:
    """Every rule the line breaks at the end; its totals into ``line.totals``."""
    orders = line_orders(soak.stack, soak.token, line)
    broken = [f"order {o['id']}: {o['status']}, {o['completedQty']} completed + {o['scrappedQty']} scrapped "
              f"of {o['quantity']}" for o in orders
              if o["status"] != "COMPLETED" or o["completedQty"] + o["scrappedQty"] != o["quantity"]]
    rules = [b for o in orders or [{"id": None}] for b in line_invariants(line.db_url, o["id"])]
    broken += list(dict.fromkeys(rules))  # the line-wide rules are checked once per order
    events = line_events(soak.stack, soak.token, line.id)
    if [e["seq"] for e in events] != list(range(1, len(events) + 1)):
        broken.append(f"its event stream has gaps: {len(events)} events up to seq {events[-1]['seq']}")
    if {e.get("lineId") for e in events} - {line.id}:
        broken.append(f"events of other lines in its stream: {({e.get('lineId') for e in events}) - {line.id}}")
    asked = _asked(line.db_url)
    still_open = sum(n for (_kind, status), n in asked.items() if status == "OPEN")
    if still_open:
        broken.append(f"{still_open} manual action(s) still open")
    cell = line_cell(soak.amqp, line)
    if cell:
        broken.append(cell)
    line.totals = {"orders": len(orders), "completed": sum(o["completedQty"] for o in orders),
                   "scrapped": sum(o["scrappedQty"] for o in orders), "events": len(events),
                   "asked": sum(asked.values()), "questions": _question_texts(line.db_url)[:4]}
    return broken


def report(soak, paces: dict, broken: list[str], wall: float) -> None:
    args = soak.args
    print()
    print(f"{'plant':<24}{', '.join(line.id for line in soak.lines)} (sim speed {args.sim_speed:g}); "
          f"victim {soak.victim.id}; faults on {', '.join(line.id for line in soak.fault_lines)}")
    print(f"{'kills':<24}{sum(soak.kills.values())} ({', '.join(f'{k} {v}' for k, v in soak.kills.items())})")
    print(f"{'faults':<24}{sum(soak.faults.values())} ({', '.join(f'{k} {v}' for k, v in sorted(soak.faults.items()))})"
          f"; {soak.mid_cycle} mid-cycle")
    down = sum((b - a).total_seconds() for a, b in soak.outages)
    print(f"{'PostgreSQL down':<24}{len(soak.outages)} times, {down:.1f}s in all (left out of the soak's pace)")
    print(f"\n{'line':<8}{'hit':<14}{'orders':>7}{'done':>6}{'scrap':>6}{'events':>8}{'asked':>7}"
          f"{'base ppm':>10}{'(n/s)':>10}{'soak ppm':>10}{'(n/s)':>10}{'ratio':>7}")
    for line in soak.lines:
        t, p = line.totals, paces[line.id]
        print(f"{line.id:<8}{'+'.join(line.hit) or 'not hit':<14}{t.get('orders', 0):>7}{t.get('completed', 0):>6}"
              f"{t.get('scrapped', 0):>6}{t.get('events', 0):>8}{t.get('asked', 0):>7}"
              f"{p['base']:>10.2f}{p['base_n']:>4}/{p['base_s']:<5.0f}{p['soak']:>10.2f}"
              f"{p['soak_n']:>4}/{p['soak_s']:<5.0f}{p['ratio']:>7.2f}")
    for line in soak.lines:
        answers = ", ".join(f"{k} {c} {n}" for (k, c), n in sorted(line.answers.items()))
        print(f"{line.id + ' answers':<24}{answers or '-'}")
        for text_, n in line.totals.get("questions", []):
            print(f"{'':<24}{n:>3} × {text_[:110]}")
        restarted = [name for name, pid in line.pids.items() if pid != soak.line_pids(line).get(name)]
        if restarted:
            print(f"{line.id + ' restarted':<24}{', '.join(restarted)} (not by this script's kills)")
        if line.errors:
            print(f"{line.id + ' operator met':<24}{len(line.errors)} errors, e.g. {line.errors[0]}")
    print(f"{'pace threshold':<24}{args.pace_threshold} of the baseline, for the lines not hit")
    print(f"{'result':<24}{'all hold' if not broken else ''}")
    for b in broken:
        print(f"  BROKEN {b}")
    print(f"{'wall time':<24}{wall:.0f}s")
