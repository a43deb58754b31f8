"""The suite in parallel: ``python -m tests.run_suite [pytest arguments]``.

Why not pytest-xdist: every test process monkey-patches eventlet (nameko needs
it), and execnet, which carries xdist's messages, does not survive that: its
receiver is a real thread waking green primitives (the worker hangs), and
patched before execnet starts it writes to regular files through epoll
(EPERM). So the suite runs as N plain pytest processes, the shards. A
whole-suite run puts every module in a queue the shards share, longest first
(tests/support/module_queue.py): each shard collects and runs one module at a
time and takes the next when it is done, so no shard collects, imports and
rewrites the others' modules, and the shards end close together whatever this
machine makes of the recorded durations. A run given paths or
``-k`` leaves the split to pytest-split (``--splits N --group i``), test by test,
by the durations recorded in ``tests/.test_durations``. The shards share nothing
but the machine:

- each has its own PostgreSQL server (embedded) or its own databases on
  ``LINECTL_TEST_DATABASE_URL``'s server, all cloned from its own migrated
  template (tests/support/db.py names them by pid);
- its own block of ports (``LINECTL_TEST_SHARD``, tests/support/ports.py);
- its own temporary directories, RabbitMQ vhost and data directories.

Each shard's output is printed when it ends; then the whole run's counts and
its slowest tests (from each shard's JUnit report). The exit status is the
worst shard's. ``LINECTL_TEST_SHARDS`` sets N (default 4: the suite waits on
processes, servers and browsers; on 2 cores three shards kept them 74 % busy and
the run took 350 s, four 90 % and 310 s); ``--store-durations``
rewrites ``tests/.test_durations`` from this run (the queue's order, and
pytest-split's split of a selection).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.support import module_queue

ROOT = Path(__file__).resolve().parent.parent
DURATIONS = ROOT / "tests" / ".test_durations"
DEFAULT_SHARDS = 4
# For the shards and every process they start (a few hundred): eventlet's green DNS
# imports dnspython, 0.25 CPU-s of every start. The suite resolves no name but
# localhost; the product keeps green DNS (a PLC or database named by host).
QUICKER_STARTS = {"EVENTLET_NO_GREENDNS": "yes"}
SLOWEST = 25


def shard_count() -> int:
    raw = os.environ.get("LINECTL_TEST_SHARDS", str(DEFAULT_SHARDS))
    if not raw.isdigit() or not 1 <= int(raw) <= 8:
        sys.exit(f"LINECTL_TEST_SHARDS must be 1..8, not {raw!r}")
    return int(raw)


def ignored(args: list[str]) -> set[str]:
    """The paths of ``--ignore=PATH`` / ``--ignore PATH``: pytest does not ignore a
    module named on its command line, so the split leaves them out itself."""
    paths = [a.partition("=")[2] for a in args if a.startswith("--ignore=")]
    paths += [b for a, b in zip(args, args[1:], strict=False) if a == "--ignore"]
    return {str((ROOT / p).resolve().relative_to(ROOT)) for p in paths}


def _left_out(module: Path, leave_out: set[str]) -> bool:
    return any(module == ROOT / p or (ROOT / p) in module.parents for p in leave_out)


def module_order(leave_out: set[str] = frozenset()) -> list[str]:
    """Every test module (but ``leave_out``), longest recorded duration first: the
    order the shards take them from the queue. A module with no recorded tests
    counts as the median module."""
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    per_module: dict[str, float] = {}
    for test_id, seconds in recorded.items():
        module = test_id.partition("::")[0]
        per_module[module] = per_module.get(module, 0.0) + seconds
    modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                     if "node_modules" not in p.parts and not _left_out(p, leave_out))
    known = sorted(per_module[m] for m in modules if m in per_module) or [1.0]
    median = known[len(known) // 2]
    return sorted(modules, key=lambda m: per_module.get(m, median), reverse=True)


def whole_suite(args: list[str]) -> bool:
    """No paths and no selection: every module runs, so the split can be by module."""
    values = {i + 1 for i, a in enumerate(args) if a == "--ignore"}  # --ignore PATH: not a path to run
    return not any((not a.startswith("-") and i not in values) or a.startswith(("-k", "-m", "--lf", "--deselect"))
                   for i, a in enumerate(args))


def start_shard(index: int, shards: int, args: list[str], work: Path, queue: Path | None) -> subprocess.Popen:
    """Shard ``index``: it takes modules from ``queue``, or (a selection) runs its
    pytest-split group of the selected tests."""
    durations = work / f"durations-{index}.json"
    durations.write_text(DURATIONS.read_text() if DURATIONS.exists() else "{}")
    split = [] if queue else [
        "--splits", str(shards), "--group", str(index), "--splitting-algorithm", "least_duration"]
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *split,
            f"--durations-path={durations}", "--store-durations",
            f"--junitxml={work / f'junit-{index}.xml'}", f"--durations={SLOWEST}", *args]
    log = open(work / f"shard-{index}.log", "wb")
    env = {**os.environ, "LINECTL_TEST_SHARD": str(index - 1), "LINECTL_TEST_SHARDS": str(shards),
           "LINECTL_TEST_STALL_LOG": str(work / f"stalls-{index}.log"), **QUICKER_STARTS}
    if queue:
        env[module_queue.QUEUE_ENV] = str(queue)
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def junit_cases(path: Path) -> list[ET.Element]:
    try:
        return list(ET.parse(path).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return []


def outcome(case: ET.Element) -> str:
    for tag, name in (("failure", "failed"), ("error", "errors"), ("skipped", "skipped")):
        if case.find(tag) is not None:
            return name
    return "passed"


def summary(work: Path, shards: int, elapsed: float) -> None:
    cases = [c for i in range(1, shards + 1) for c in junit_cases(work / f"junit-{i}.xml")]
    counts: dict[str, int] = {}
    for case in cases:
        counts[outcome(case)] = counts.get(outcome(case), 0) + 1
    slowest = sorted(cases, key=lambda c: float(c.get("time", 0)), reverse=True)[:SLOWEST]
    print(f"\n==== the whole suite: {shards} shards, {elapsed:.0f} s of wall time ====")
    print(f"slowest {len(slowest)} tests (setup + call + teardown):")
    for case in slowest:
        print(f"  {float(case.get('time', 0)):7.2f}s  {case.get('classname')}::{case.get('name')}")
    print(", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + f" in {elapsed:.1f}s")


def merged_durations(recorded: dict[str, float], shard_files: list[dict[str, float]]) -> dict[str, float]:
    """The record after a run: each shard's file is the whole record as it started
    with the times of the tests that shard ran; a test's time is the one that
    changed (a shard's copy of the others' tests is the old record)."""
    merged = dict(recorded)
    for stored in shard_files:
        merged.update({test: seconds for test, seconds in stored.items() if recorded.get(test) != seconds})
    return merged


def store_durations(work: Path, shards: int, recorded: dict[str, float]) -> None:
    merged = merged_durations(recorded, [json.loads((work / f"durations-{index}.json").read_text())
                                         for index in range(1, shards + 1)])
    DURATIONS.write_text(json.dumps(merged, sort_keys=True, indent=1) + "\n")
    print(f"stored {len(merged)} test durations in {DURATIONS.relative_to(ROOT)}")


def main(argv: list[str]) -> int:
    store = "--store-durations" in argv
    args = [a for a in argv if a != "--store-durations"]
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    shards = shard_count()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="linectl-suite-") as tmp:
        work = Path(tmp)
        queue = None
        if whole_suite(args):
            queue = work / "queue"
            module_queue.write_queue(queue, module_order(ignored(args)))
        running = {i: start_shard(i, shards, args, work, queue) for i in range(1, shards + 1)}
        print(f"running the suite in {shards} shards (logs in {work})", flush=True)
        codes: dict[int, int] = {}
        try:
            while running:
                for index, proc in list(running.items()):
                    if proc.poll() is None:
                        continue
                    codes[index] = proc.returncode
                    del running[index]
                    print(f"\n==== shard {index}/{shards} ended ({proc.returncode}) after "
                          f"{time.monotonic() - started:.0f} s ====", flush=True)
                    sys.stdout.write((work / f"shard-{index}.log").read_text(errors="replace"))
                    sys.stdout.flush()
                time.sleep(0.2)  # polling a few child processes; nothing to synchronise with
        except KeyboardInterrupt:
            for proc in running.values():
                proc.terminate()
            raise
        for index in range(1, shards + 1):  # tests/support/stall_report.py
            stalls = work / f"stalls-{index}.log"
            if stalls.exists():
                print(f"\n==== shard {index}: set-ups or teardowns that stalled ====\n"
                      + stalls.read_text(errors="replace"))
        summary(work, shards, time.monotonic() - started)
        if store:
            store_durations(work, shards, recorded)
    # 5: "no tests collected" in a shard that got none of a small selection.
    worst = max((0 if code == 5 else code) for code in codes.values())
    if all(code == 5 for code in codes.values()):
        worst = 5
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
