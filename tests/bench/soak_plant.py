"""Crash soak of a plant (issue 38; ``make soak SOAK_ARGS=--plant``): ``linectl
up`` runs a plant of several lines (``--plant-file``, the demo plant
deploy/plant.yaml by default: cell-a and cell-b on Modbus, cell-c on OPC UA) and
every line runs orders at once, while this script hits ONE line (``--victim``):
``kill -9`` of that line's line_controller and hardware service (found by the
line id in their command lines), and crash-like restarts of the PostgreSQL
server every line shares; and injects ``--faults`` floor faults (a machine fault
mid-cycle or an e-stop, through the line's simulator control: Modbus registers
or OPC UA methods) on the ``--fault-lines`` (the victim by default).

An operator per line (a thread each) keeps ``IN_FLIGHT`` orders running on its
line (a new one as soon as one completes, so a line never drains between
orders), and answers its line's questions through ``/api/lines/{id}/…``: recovery
questions from the cell's state, faults with a random allowed choice, a finished
piece the robot could not take out by hand.

At the end, per line: every order COMPLETED with completed + scrapped = quantity
and jobs agreeing, no job in two slots, no buffer slot held twice, its event seq
gapless (in PostgreSQL and through ``/api/lines/{id}/events``, every frame
carrying its ``lineId``), no manual action open, the cell empty.

Pace: each line's pieces (jobs finished) per minute in a baseline window with
nothing injected (``--baseline-seconds``, once every line has finished pieces)
against the soak window (first disturbance to the last one's recovery), counted
only while PostgreSQL was up: a PostgreSQL restart stops every line by design
(from the kill until ``/readyz`` is 200 again: those windows are left out of the
soak's time and nothing can finish inside them). A line neither killed nor
faulted must keep ``--pace-threshold`` of its baseline pace (docs/operations.md,
"After a restart: recovery").

    .venv/bin/python tests/bench/soak_plant.py [--kills 12] [--faults 6] [--victim cell-b]
        [--fault-lines cell-b[,…]] [--quantity 10] [--baseline-seconds 180] [--pace-threshold 0.75]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from services.hardware.sim.control import sim_control  # noqa: E402
from shared.db.engine import sqlalchemy_url  # noqa: E402
from shared.events import LineServices  # noqa: E402
from shared.layout import Layout  # noqa: E402
from shared.plant import load_plant  # noqa: E402
from tests.bench.soak_crash import (  # noqa: E402
    ESTOP,
    _last_seq,
    _wait_recovery_checked,
    play_fault,
    restart_postgres,
    wait_mid_cycle,
)
from tests.bench.soak_plant_checks import line_broken, pace, report  # noqa: E402
from tests.ops.operator import resolve_open_faults, resolve_open_recovery  # noqa: E402
from tests.ops.stack import Stack  # noqa: E402
from tests.ops.test_plant import line_pid  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

PLANT = ROOT / "deploy" / "plant.yaml"
VICTIMS = (("line_controller", 0.55), ("hardware", 0.25), ("postgres", 0.2))
IN_FLIGHT = 2  # orders a fed line keeps running: the next one's pieces follow without a gap


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class Line:
    id: str
    default: bool
    layout: Layout
    sim_address: str
    product: str
    db_url: str = ""
    hit: list[str] = field(default_factory=list)  # "kills", "faults": empty for a line not hit
    answers: dict = field(default_factory=dict)  # (kind, choice) → n, by this line's operator
    errors: list[str] = field(default_factory=list)  # what this line's operator met (503s while down…)
    totals: dict = field(default_factory=dict)  # orders, completed, scrapped, events: filled at the end
    pids: dict = field(default_factory=dict)  # its processes once warm, to see which restarted by themselves

    @property
    def api(self) -> str:
        return f"/api/lines/{self.id}"

    @property
    def named(self) -> str | None:
        """The line as tests/ops/operator.py names it: None for the default line."""
        return None if self.default else self.id

    @property
    def hardware(self) -> str:
        return LineServices(self.named).hardware

    def control(self):
        return sim_control(self.layout, self.sim_address)

    def count(self, kind: str, choice: str, n: int = 1) -> None:
        self.answers[(kind, choice)] = self.answers.get((kind, choice), 0) + n


def plant_lines(stack: Stack, plant_file: Path) -> list[Line]:
    """The plant's lines, each with its simulator's address and its schema's URL."""
    from sqlalchemy import create_engine, text

    base = sqlalchemy_url(stack.database_url())
    engine = create_engine(base)
    with engine.connect() as c:
        schemas = dict(c.execute(text("SELECT id, schema_name FROM plant_line")).all())
    engine.dispose()
    lines = []
    for i, pl in enumerate(load_plant(plant_file).lines):
        scheme = "opc.tcp://" if pl.sim_protocol == "opcua" else ""
        path = quote(f'-csearch_path="{schemas[pl.id]}"')
        lines.append(Line(pl.id, i == 0, pl.layout, f"{scheme}127.0.0.1:{stack.sim_port + i}",
                          pl.layout.products[0].id, f"{base}{'&' if '?' in base else '?'}options={path}"))
    return lines


class Soak:
    def __init__(self, stack: Stack, args, lines: list[Line]):
        self.stack, self.args, self.lines = stack, args, lines
        self.token, self.amqp = stack.token("operator"), stack.amqp_uri()
        self.victim = next(line for line in lines if line.id == args.victim)
        fault_ids = (args.fault_lines or args.victim).split(",")
        self.fault_lines = [line for line in lines if line.id in fault_ids]
        self.feeding, self.done = threading.Event(), threading.Event()
        self.outages: list[tuple[datetime, datetime]] = []  # PostgreSQL down: kill → /readyz 200
        self.kills: dict[str, int] = {name: 0 for name, _ in VICTIMS}
        self.faults: dict[str, int] = {}
        self.mid_cycle = 0

    # -- the operator of each line (a thread each) ------------------------------------

    def crew(self, line: Line, rng: random.Random) -> None:
        while not self.done.is_set():
            try:
                if self.feeding.is_set():
                    self.feed(line)
                n = resolve_open_recovery(self.stack, self.token, self.amqp, line.named)
                if n:
                    line.count("RECOVERY_*", "(from the cell)", n)
                resolve_open_faults(self.stack, self.token, rng, line.answers, line.named)
                self.take_out_finished(line)
            except Exception as exc:  # noqa: BLE001 - a line or PostgreSQL down: again in a moment
                line.errors.append(f"{type(exc).__name__}: {str(exc)[:160]}")
            self.done.wait(1.0)

    def feed(self, line: Line) -> None:
        """Keep IN_FLIGHT orders running on the line: start any created, create the missing one."""
        get, post = self.stack.get, self.stack.request
        active = []
        for status in ("RUNNING", "CREATED"):
            code, body = get(f"{line.api}/work-orders?status={status}&limit=500", self.token, timeout=30)
            if code != 200:
                return
            active += body["items"]
        for order in active:
            if order["status"] == "CREATED":
                post("POST", f"{line.api}/work-orders/{order['id']}/start", {}, self.token, timeout=30)
        if len(active) < IN_FLIGHT:
            code, order = post("POST", f"{line.api}/work-orders",
                               {"productId": line.product, "quantity": self.args.quantity}, self.token, timeout=30)
            if code == 201:
                post("POST", f"{line.api}/work-orders/{order['id']}/start", {}, self.token, timeout=30)

    def take_out_finished(self, line: Line) -> None:
        """A finished piece the robot could not take out (its BUFFER_TO_DOCK failed, as
        in an e-stop) is taken off its buffer slot by hand, and the action answered DONE."""
        code, body = self.stack.get(f"{line.api}/manual-actions?status=OPEN&limit=500", self.token)
        actions = [a for a in body.get("items", []) if a["kind"] == "REMOVE_FINISHED_PIECE"] if code == 200 else []
        if not actions:
            return
        control = line.control()
        try:
            for action in actions:
                control.take_from_buffer(int(action["facts"]["bufferSlot"]))
                code, reply = self.stack.request("POST", f"{line.api}/manual-actions/{action['id']}/resolve",
                                                 {"resolution": "DONE"}, self.token, timeout=30)
                assert code == 200, (code, reply)
                line.count(action["kind"], "DONE")
        finally:
            control.close()

    # -- what hits the victim ----------------------------------------------------------

    def schedule(self, rng: random.Random) -> list[tuple[Line, str]]:
        """(line, what): each kind of kill at least once, the rest by weight, and the faults."""
        names, weights = [n for n, _ in VICTIMS], [w for _, w in VICTIMS]
        kills = [n for n in names if n != "line_controller"][:self.args.kills]
        kills += rng.choices(names, weights, k=self.args.kills - len(kills))
        items = [(self.victim, name) for name in kills]
        for _ in range(self.args.faults):
            line = rng.choice(self.fault_lines)
            machines = [e.id for e in line.layout.equipment]
            items.append((line, ESTOP if rng.random() < 0.3 else f"fault {rng.choice(machines)}"))
        rng.shuffle(items)
        return items

    def inject(self, n: int, line: Line, what: str, rng: random.Random) -> None:
        """A machine fault (or the line's e-stop) once a machine runs, cleared 0.5..2 s later."""
        mid_cycle = wait_mid_cycle(line.db_url, what)
        play_fault(line.control(), what, rng)
        self.faults[f"{line.id} {what}"] = self.faults.get(f"{line.id} {what}", 0) + 1
        self.mid_cycle += mid_cycle
        print(f"fault {n:2}: {line.id} {what:<12} injected and cleared{' mid-cycle' if mid_cycle else ''}",
              flush=True)

    def kill(self, n: int, name: str) -> None:
        """``kill -9`` of the victim's process (postgres: an immediate restart), then
        until it is back, checked against its PLC, and its questions answered."""
        line, t_kill = self.victim, time.monotonic()
        if name == "postgres":
            down = utcnow()
            restart_postgres(self.stack)
            self.stack.wait_ready(120)
            self.outages.append((down, utcnow()))
        else:
            seq_before = _last_seq(line.db_url)
            pid = None
            for _ in range(3):  # not running (still restarting): again once the stack is ready
                pid = line_pid(self.stack, name, line.id)
                if pid is not None:
                    break
                self.stack.wait_ready(120)
            if pid is None:
                print(f"kill {n:2}: {line.id} {name} was never running to be stopped", flush=True)
                return
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: line_pid(self.stack, name, line.id) not in (None, pid), 60, 0.05,
                     f"{line.id}'s {name} restarted")
            self.stack.wait_ready(120)
            _wait_recovery_checked(line.db_url, seq_before)
        self.kills[name] += 1
        answered = self.wait_answered(line)
        print(f"kill {n:2}: {line.id} {name:<16} ready again after {time.monotonic() - t_kill:5.1f}s"
              f"{'' if answered else '  (recovery questions still open after 60 s)'}", flush=True)

    def line_pids(self, line: Line) -> dict[str, int | None]:
        return {name: line_pid(self.stack, name, line.id) for name in ("sim", "hardware", "line_controller")}

    def wait_answered(self, line: Line, seconds: float = 60.0) -> bool:
        """Until the line's operator has answered its recovery questions (bounded)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            code, body = self.stack.get(f"{line.api}/manual-actions?status=OPEN&limit=500", self.token)
            if code == 200 and not any(a["kind"].startswith("RECOVERY") for a in body["items"]):
                return True
            time.sleep(0.5)
        return False

    # -- the run -----------------------------------------------------------------------

    def warm_up(self, seconds: float = 300.0) -> None:
        """Until every line has finished pieces (its pipeline full)."""
        from sqlalchemy import create_engine, text

        def finished(line):
            engine = create_engine(line.db_url, pool_size=1)
            try:
                with engine.connect() as c:
                    return c.execute(text("SELECT count(*) FROM job WHERE finished_at IS NOT NULL")).scalar()
            finally:
                engine.dispose()
        wait_for(lambda: all(finished(line) >= 2 for line in self.lines), seconds, 1.0, "every line's pieces")

    def finish(self) -> bool:
        """No new orders; until every order of every line has completed (its operator answering)."""
        self.feeding.clear()
        deadline = time.monotonic() + self.args.finish_seconds
        while time.monotonic() < deadline:
            if all(self.stack.get(f"{line.api}/work-orders?status={status}&limit=1", self.token)[1].get("items") == []
                   for line in self.lines for status in ("CREATED", "RUNNING", "PAUSED")):
                return True
            time.sleep(2.0)
        return False

    def run(self, rng: random.Random) -> int:
        t0 = time.monotonic()
        crews = [threading.Thread(target=self.crew, args=(line, random.Random(rng.random())), daemon=True)
                 for line in self.lines]
        self.feeding.set()
        for thread in crews:
            thread.start()
        self.warm_up()
        for line in self.lines:
            line.pids = {} if line is self.victim else self.line_pids(line)
        base_from = utcnow()
        print(f"baseline: {self.args.baseline_seconds:.0f}s with nothing injected, every line fed", flush=True)
        time.sleep(self.args.baseline_seconds)
        base = (base_from, utcnow())
        soak_from = base[1]
        for line in self.lines:
            line.hit += ["kills"] if line is self.victim else []
            line.hit += ["faults"] if line in self.fault_lines and self.args.faults else []
        for n, (line, what) in enumerate(self.schedule(rng), 1):
            time.sleep(rng.uniform(0.5, 4.0))  # a random moment of the running orders
            if what == ESTOP or what.startswith("fault"):
                self.inject(n, line, what, rng)
            else:
                self.kill(n, what)
        soak = (soak_from, utcnow())
        finished = self.finish()
        self.done.set()
        for thread in crews:
            thread.join(60)
        paces = {line.id: pace(line.db_url, base, soak, self.outages) for line in self.lines}
        broken = [f"{line.id}: {b}" for line in self.lines for b in line_broken(self, line)]
        if not finished:
            broken.append(f"orders not all completed within {self.args.finish_seconds:.0f}s of the last hit")
        broken += self.shortfalls(paces)
        report(self, paces, broken, time.monotonic() - t0)
        return 0 if not broken else 1

    def shortfalls(self, paces: dict) -> list[str]:
        broken = []
        kills, faults = sum(self.kills.values()), sum(self.faults.values())
        if kills < self.args.kills or faults < self.args.faults:
            broken.append(f"fewer than asked: {kills} of {self.args.kills} kills, "
                          f"{faults} of {self.args.faults} faults")
        for line in self.lines:
            ratio = paces[line.id]["ratio"]
            if not line.hit and not ratio >= self.args.pace_threshold:
                broken.append(f"{line.id} (not hit) kept {ratio:.2f} of its pace, below {self.args.pace_threshold}")
        return broken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plant-file", type=Path, default=PLANT)
    parser.add_argument("--victim", default="cell-b", help="the line whose processes are killed")
    parser.add_argument("--fault-lines", default=None, help="ID[,ID…]: where faults go (default: the victim)")
    parser.add_argument("--kills", type=int, default=12, help="kill -9 of the victim's services, PostgreSQL restarts")
    parser.add_argument("--faults", type=int, default=6, help="machine faults mid-cycle and e-stops")
    parser.add_argument("--quantity", type=int, default=10, help="pieces per order (each line keeps 2 running)")
    parser.add_argument("--baseline-seconds", type=float, default=180.0)
    parser.add_argument("--pace-threshold", type=float, default=0.75,
                        help="the least share of its baseline pace a line not hit must keep")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--sim-speed", type=float, default=20.0)
    parser.add_argument("--finish-seconds", type=float, default=900.0)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout`: through the cleanup below
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="linectl-soak-plant-") as tmp:
        stack = Stack(Path(tmp) / "data", {}, sim_speed=args.sim_speed,
                      extra_env={"LINECTL_LOG_LEVEL": "WARNING", "LINECTL_PLANT_FILE": str(args.plant_file)})
        try:
            stack.up()
            stack.wait_line("linectl: ready", 240)
            lines = plant_lines(stack, args.plant_file)
            if args.victim not in [line.id for line in lines]:
                parser.error(f"--victim {args.victim}: the plant has no such line")
            code = Soak(stack, args, lines).run(rng)
            assert stack.terminate() == 0
            return code
        finally:
            stack.cleanup()


if __name__ == "__main__":
    sys.exit(main())
