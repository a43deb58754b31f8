"""The real-pace mode of bench_plant.py (issue 55): every line at one piece a
minute, as a real cell of deploy/lines/cell-a.yaml runs, instead of flat out.

What it adds to the plant bench's figures, per plant size and transport:

* PostgreSQL's CPU per line-minute, idle (the idle window's, per line) and busy
  (the run's, over the lines' busy minutes: each line's StartOrder to its order
  COMPLETED, summed), and so how many busy lines one PostgreSQL core carries
  measured directly (psutil counts CPU in 10 ms ticks: over a 30 s idle window
  one line's idle figure comes in steps of 20 ms a minute);
* the lines' own CPU (line_controller and hardware service; the simulators,
  which stand in for the PLCs, apart), per line, in ms per second, idle and busy;
* each line's processes' memory (RSS, PSS, USS; PostgreSQL's apart), and so how
  many lines this machine's memory holds;
* every order exact: completed + scrapped = ordered, as many jobs as pieces, no
  job in two places, the event log gapless (tests/ops/invariants.py);
* with two transports, each figure side by side and their ratio.
"""

from __future__ import annotations

import math
from urllib.parse import quote as url_quote

import psutil

from shared.layout import load_layout
from shared.product_ideals import product_ideal_seconds
from tests.bench.plant_report import percentile
from tests.ops.invariants import line_invariants

MIB = 1024 * 1024


def real_pace_speed(layout_file, product: str, seconds_per_piece: float = 60.0) -> float:
    """The simulator speed at which a piece takes ``seconds_per_piece``: the
    product's ideal cycle (its robot's moves at their rated times, the line's
    bottleneck) played that much faster."""
    ideal = product_ideal_seconds(load_layout(layout_file))[product]
    if ideal is None:
        raise SystemExit(f"{layout_file}: {product} has no idealCycleSeconds to set a real pace by")
    return ideal / seconds_per_piece


def memory(line_pids: dict[str, list[int]], postmaster: psutil.Process) -> dict:
    """Each line's processes' RSS, PSS and USS summed (MiB; their mean and the
    largest over the lines), and PostgreSQL's (the postmaster and its children).
    PSS shares each shared page among the processes that map it: its sum is what
    the processes take together."""
    per_line = []
    for pids in line_pids.values():
        infos = [psutil.Process(pid).memory_full_info() for pid in pids]
        per_line.append({k: sum(getattr(i, k) for i in infos) / MIB for k in ("rss", "pss", "uss")})
    pg = 0.0
    for proc in [postmaster, *postmaster.children()]:
        try:
            pg += proc.memory_full_info().pss / MIB
        except psutil.NoSuchProcess:
            pass
    mean = {k: sum(m[k] for m in per_line) / len(per_line) for k in ("rss", "pss", "uss")}
    return {"line": mean, "line_max_pss": max(m["pss"] for m in per_line), "pg_pss": pg,
            "total": psutil.virtual_memory().total / MIB}


def too_large(measured: list[dict], count: int) -> str | None:
    """Why a plant of ``count`` lines would not fit in the memory free now (None: it
    fits), by the largest PSS a line and PostgreSQL took per line in the sizes
    measured before; nothing measured yet: it is tried."""
    if not measured:
        return None
    line = max(r["memory"]["line"]["pss"] + r["memory"]["pg_pss"] / r["lines"] for r in measured)
    free = psutil.virtual_memory().available / MIB
    need = count * line
    if need > 0.8 * free:
        return (f"{count} lines would take about {need / 1024:.1f} GiB ({line:.0f} MiB a line), "
                f"{free / 1024:.1f} GiB free")
    return None


def line_url(url: str, schema: str) -> str:
    """The database URL with ``schema`` first on the search_path (for the invariants' SQL)."""
    path = url_quote(f'-csearch_path="{schema}"')
    return f"{url}{'&' if '?' in url else '?'}options={path}"


def exactness(url: str, lines, engine) -> dict:
    """Every line's order exact, by tests/ops/invariants.py: the broken rules
    (line id: text) and the pieces counted, completed and scrapped."""
    from sqlalchemy import text

    from shared.db.lines import quote

    broken, done, scrap = [], 0, 0
    with engine.connect() as conn:
        for line in lines:
            row = conn.execute(text(f"SELECT completed_qty, scrapped_qty FROM {quote(line.schema)}.work_order "
                                    "WHERE id = :id"), {"id": line.order_id}).one()
            done, scrap = done + row.completed_qty, scrap + row.scrapped_qty
            broken += [f"{line.id}: {b}" for b in line_invariants(line_url(url, line.schema), line.order_id)]
    return {"broken": broken, "completed": done, "scrapped": scrap}


def exact_text(r: dict, pieces: int) -> str:
    e = r["exact"]
    ordered = pieces * r["lines"]
    if e["broken"]:
        return f"orders NOT exact: {'; '.join(e['broken'][:5])}"
    return (f"every order exact: {r['lines']} of {r['lines']}, {e['completed'] + e['scrapped']} pieces counted "
            f"of {ordered} ordered ({e['completed']} completed, {e['scrapped']} scrapped), "
            "no piece lost or counted twice")


def pace_figures(r: dict) -> dict:
    """The real-pace figures of one plant size (one transport)."""
    n, idle, run = r["lines"], r["idle"], r["run"]
    busy = r["busy_seconds"]  # the lines' busy seconds, summed
    pieces = r["exact"]["completed"] + r["exact"]["scrapped"]
    return {
        "pace": pieces * 60 / busy,
        "pg_idle": idle["pg"] * 60 / n * 1000,       # ms per line-minute
        "pg_busy": run["pg"] / busy * 60 * 1000,      # ms per busy line-minute
        "commits_idle": idle["commits"] / n,          # per line-second
        "commits": run["commits"] / pieces,
        "syncs": run["syncs"] / pieces,
        "own_idle": idle["services"] / n * 1000,      # ms/s per line
        "own_busy": run["services"] / busy * 1000,
        "sim_busy": run["sims"] / busy * 1000,
        "per_core": 60_000 / (run["pg"] / busy * 60 * 1000) if run["pg"] else float("nan"),
        "p50": percentile(r["latency"], 0.5) * 1000,
        "p99": percentile(r["latency"], 0.99) * 1000,
    }


ROWS = (("pace", "pieces/min per line (busy)", ".2f"),
        ("pg_idle", "PG CPU ms per line-minute, idle", ".1f"),
        ("pg_busy", "PG CPU ms per line-minute, busy", ".0f"),
        ("per_core", "busy lines per PG core", ".0f"),
        ("commits_idle", "commits per line-second, idle", ".3f"),
        ("commits", "commits per piece", ".0f"),
        ("syncs", "WAL flushes per piece", ".1f"),
        ("own_idle", "line's own CPU ms/s, idle", ".1f"),
        ("own_busy", "line's own CPU ms/s, busy", ".1f"),
        ("sim_busy", "its simulator's CPU ms/s, busy", ".1f"),
        ("p50", "loop latency p50 ms", ".0f"),
        ("p99", "loop latency p99 ms", ".0f"))


def pace_summary(r: dict) -> str:
    """The real-pace figures of one run, in a line, printed as soon as it is measured."""
    f, m = pace_figures(r), r["memory"]
    return (f"   real pace: {f['pace']:.2f} pieces/min per line; PG CPU per line-minute {f['pg_idle']:.1f} ms idle, "
            f"{f['pg_busy']:.0f} ms busy; {f['commits']:.0f} commits and {f['syncs']:.1f} WAL flushes per piece; "
            f"own CPU per line {f['own_idle']:.1f} ms/s idle, {f['own_busy']:.1f} busy; "
            f"memory per line PSS {m['line']['pss']:.0f} MiB")


def pace_table(results: dict[str, list[dict]], title: str) -> None:
    """Every figure per plant size, one column per transport; with two, the first's
    against the second's (the reference)."""
    kinds = list(results)
    sizes = sorted({r["lines"] for rs in results.values() for r in rs})
    by = {(k, r["lines"]): pace_figures(r) for k, rs in results.items() for r in rs}
    ratio = len(kinds) == 2
    head = f"{'':<34}{'lines':>6}" + "".join(f"{k:>10}" for k in kinds)
    print(f"\n{title}, per line:" + (f" {kinds[0]} against {kinds[1]} (the reference)" if ratio else ""))
    print(head + (f"{'ratio':>8}" if ratio else ""))
    for key, label, fmt in ROWS:
        for n in sizes:
            values = [by.get((k, n), {}).get(key) for k in kinds]
            cells = "".join(f"{v:>10{fmt}}" if v is not None else f"{'-':>10}" for v in values)
            tail = ""
            if ratio and None not in values:
                tail = f"{values[0] / values[1]:>8.2f}" if values[1] else f"{'-':>8}"
            print(f"{label:<34}{n:>6}{cells}{tail}")


def memory_report(results: dict[str, list[dict]]) -> None:
    """What one line's processes take, and how many lines this machine's memory holds."""
    print("\nmemory of one line's processes (sim + hardware + line_controller), MiB, mean over the lines:")
    print(f"{'transport':<10}{'lines':>6}{'RSS':>8}{'PSS':>8}{'USS':>8}{'max PSS':>9}{'PG PSS':>8}{'lines in RAM':>13}")
    for kind, rs in results.items():
        for r in rs:
            m = r["memory"]
            fits = math.floor((m["total"] - m["pg_pss"]) / m["line"]["pss"])
            print(f"{kind:<10}{r['lines']:>6}{m['line']['rss']:>8.0f}{m['line']['pss']:>8.0f}{m['line']['uss']:>8.0f}"
                  f"{m['line_max_pss']:>9.0f}{m['pg_pss']:>8.0f}{fits:>13}")
    print(f"  lines in RAM: (this machine's {m['total'] / 1024:.1f} GiB - PostgreSQL's PSS) / a line's PSS; "
          "RSS counts the shared pages (the interpreter, libraries) once per process, PSS shares them out")
