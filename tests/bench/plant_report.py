"""The table and the arithmetic of bench_plant.py (issue 38): per plant size, the
lines' pace, the loop's latency and what PostgreSQL spends per piece; then what
one line costs PostgreSQL at a real cell's pace (one piece a minute) and how
many such lines one PostgreSQL core carries.

The real-pace figure is the work of a piece (the run's PostgreSQL CPU less what
the plant would have spent idle over the run's time, per piece: the largest of
the plant sizes) plus a minute of one line's idle cost (the slope of the idle
cost against the number of lines); what PostgreSQL spends idle whatever the
number of lines (the intercept) comes off the core first.
"""

from __future__ import annotations

import os

PRODUCT = "BRACKET-A"


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def summary(r: dict, pieces: int) -> str:
    """One plant size in a line, printed as soon as it is measured."""
    total, lat = pieces * r["lines"], r["latency"]
    return (f"   pieces/min per line {', '.join(f'{p:.1f}' for p in r['paces'])}; loop latency p50 "
            f"{percentile(lat, 0.5) * 1000:.0f} ms, p99 {percentile(lat, 0.99) * 1000:.0f} ms; per piece "
            f"{r['run']['pg'] / total:.3f} PG CPU-s, {r['run']['commits'] / total:.0f} commits")


def table(results: list[dict], pieces: int) -> None:
    cores = os.cpu_count()
    print(f"{'lines':>5}{'ppm mean':>9}{'ppm min':>8}{'vs 1':>6}{'p50 ms':>7}{'p99 ms':>7}{'msgs':>6}"
          f"{'PG cpu-s/pc':>12}{'commits/pc':>11}{'write tx/pc':>12}{'loop tx/pc':>11}{'fsyncs/pc':>10}"
          f"{'svc cpu-s/pc':>13}"
          f"{'sim cpu-s/pc':>13}{'ours':>5}{'others':>7}")
    alone = sum(results[0]["paces"]) / len(results[0]["paces"])
    for r in results:
        n, run, lat = r["lines"], r["run"], r["latency"]
        total, mean = pieces * n, sum(r["paces"]) / n
        ours = (run["pg"] + run["services"] + run["sims"] + run["bench"]) / run["wall"] / cores
        print(f"{n:>5}{mean:>9.1f}{min(r['paces']):>8.1f}{mean / alone:>6.2f}"
              f"{percentile(lat, 0.5) * 1000:>7.0f}{percentile(lat, 0.99) * 1000:>7.0f}{len(lat):>6}"
              f"{run['pg'] / total:>12.3f}{run['commits'] / total:>11.0f}{run['xids'] / total:>12.0f}"
              f"{r['loop_tx'] / total:>11.1f}{run['syncs'] / total:>10.1f}"
              f"{run['services'] / total:>13.3f}{run['sims'] / total:>13.3f}"
              f"{ours:>5.0%}{run['busy'] / run['wall'] / cores - ours:>7.0%}")


def fit(results: list[dict], key: str) -> tuple[float, float]:
    """Idle cost per second = fixed + per_line × lines, least squares over the sizes."""
    xs, ys = [r["lines"] for r in results], [r["idle"][key] for r in results]
    if len(set(xs)) < 2:
        return 0.0, ys[0] / xs[0]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return max(0.0, my - slope * mx), slope  # a negative intercept is the noise of a fixed cost near 0


def idle_table(results: list[dict]) -> None:
    print("\nidle (orders created, nothing running), the whole plant per second:")
    print(f"{'lines':>5}{'PG cpu-ms/s':>12}{'commits/s':>10}{'write tx/s':>11}{'fsyncs/s':>9}{'svc cpu-ms/s':>13}")
    for r in results:
        idle = r["idle"]
        print(f"{r['lines']:>5}{idle['pg'] * 1000:>12.1f}{idle['commits']:>10.1f}{idle['xids']:>11.1f}"
              f"{idle['syncs']:>9.1f}{idle['services'] * 1000:>13.1f}")


def work_per_piece(results: list[dict], pieces: int, key: str) -> float:
    """The largest over the plant sizes of: the run's ``key`` less the plant's idle
    rate over the run's time, per piece."""
    return max((r["run"][key] - r["idle"][key] * r["run"]["wall"]) / (pieces * r["lines"]) for r in results)


def real_pace(results: list[dict], pieces: int, ceil: float) -> None:
    idle_table(results)
    figures = {key: (work_per_piece(results, pieces, key), *fit(results, key)) for key in ("pg", "commits", "syncs")}
    print("\nper line at 1 piece/min = work per piece (the run less the plant's idle cost over its time; "
          "the largest of the sizes) + 60 s × idle per line (the slope of idle against lines; fixed: the intercept)")
    for key, label, f in (("pg", "PG CPU-s", ".3f"), ("commits", "commits", ".0f"), ("syncs", "WAL fsyncs", ".1f")):
        work, fixed, per_line = figures[key]
        minute = work + 60 * per_line
        print(f"  {label}: {work:{f}} + 60 × {per_line:.4f} = {minute:{f}} per line-minute "
              f"({minute / 60:.4f}/s per line; fixed {fixed:.4f}/s)")
    work, fixed, per_line = figures["pg"]
    minute = work + 60 * per_line
    print(f"lines per PG core: (60 - 60 × {fixed:.4f}) / {minute:.3f} = {(60 - 60 * fixed) / minute:.0f}; "
          f"one connection's commit ceiling here {ceil:.0f}/s")


def report(results: list[dict], args, ceil: float) -> None:
    print(f"\nplant benchmark: every line one order of {args.pieces} × {PRODUCT}, simulator speed {args.speed:g}, "
          f"transport {results[0]['transport']}, "
          f"one PostgreSQL (fsync on), {os.cpu_count()} cores; ours/others: the machine's CPU our processes / "
          f"everything else used during the run")
    table(results, args.pieces)
    real_pace(results, args.pieces, ceil)
