"""A plant of lines for bench_plant.py: their layouts and plant file, and each
line's simulator, hardware service and line_controller as OS processes of
their own, as ``linectl up`` runs them."""

import os
import subprocess
import sys
import time
from pathlib import Path

import eventlet
import yaml

from shared.events import LineServices
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "deploy" / "lines" / "cell-a.yaml"
SEED = 3  # every line's simulator: the same inspection outcomes, so the same work


class Line:
    def __init__(self, n: int, directory: Path):
        self.id = f"cell-{n}"
        self.names = LineServices.of_line(self.id, default=n == 1)
        self.layout_file = directory / f"{self.id}.yaml"
        self.sim_port = free_port()
        self.schema = "public"
        self.order_id = None
        self.started = self.ended = None  # perf_counter
        self.started_at = None  # UTC, for the loop_message window
        self.pids = []  # its simulator's, hardware's and line_controller's


def write_plant(directory: Path, count: int) -> tuple[Path, list[Line]]:
    directory.mkdir(parents=True)
    template = yaml.safe_load(TEMPLATE.read_text())
    lines = [Line(n, directory) for n in range(1, count + 1)]
    for line in lines:
        layout = {**template, "line": {**template["line"], "id": line.id, "name": f"Bench {line.id}"}}
        line.layout_file.write_text(yaml.safe_dump(layout, sort_keys=False))
    plant = {"plant": {"id": f"bench-{count}", "name": f"Bench plant of {count}"},
             "lines": [{"layout": line.layout_file.name, "plc": "sim"} for line in lines]}
    plant_file = directory / "plant.yaml"
    plant_file.write_text(yaml.safe_dump(plant, sort_keys=False))
    return plant_file, lines


def start_processes(url: str, amqp: str, plant_file: Path, lines: list[Line], args, logs: Path) -> list:
    """Every line's simulator, hardware and line_controller: (label, Popen)."""
    base = {**os.environ, "LINECTL_PLANT_FILE": str(plant_file), "LINECTL_DATABASE_URL": url, "LINECTL_AMQP_URI": amqp,
            "LINECTL_PLC": "sim", "LINECTL_SIM_SPEED": f"{args.speed:g}", "LINECTL_DATA_DIR": str(logs),
            "LINECTL_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
    procs = []
    for line in lines:
        env = {**base, "LINECTL_LINE_FILE": str(line.layout_file), "LINECTL_SIM_PORT": str(line.sim_port)}
        commands = {
            "sim": [sys.executable, "-m", "services.stack.cli", "sim", "--seed", str(SEED),
                    "--pallet-size", str(args.pieces + 8), "--pallet-seconds", "1"],
            "hardware": [sys.executable, "-m", "services.stack.run_service", "hardware", "--line", line.id],
            "line_controller": [sys.executable, "-m", "services.stack.run_service", "line_controller",
                                "--line", line.id],
        }
        for kind, argv in commands.items():
            log = open(logs / f"{line.id}-{kind}.log", "wb")  # noqa: SIM115 - closed with the process
            procs.append((f"{line.id} {kind}", subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log,
                                                                stderr=subprocess.STDOUT)))
            line.pids.append(procs[-1][1].pid)
    return procs


def start_lines(rpc, url: str, amqp: str, plant_file: Path, lines: list[Line], procs: list, args) -> None:
    """The lines' processes, ``--start-batch`` lines at a time, each batch ready
    (PLC connected, recovery check done) before the next starts: 32 lines' 96
    interpreters starting at once on 2 cores would take minutes to time out."""
    for i in range(0, len(lines), args.start_batch):
        batch = lines[i:i + args.start_batch]
        procs += start_processes(url, amqp, plant_file, batch, args, plant_file.parent)
        wait_ready(rpc, batch, procs)


def stop_processes(procs: list) -> None:
    for _, proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + 40
    for label, proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"  {label} did not stop: killed", file=sys.stderr)
            proc.kill()
            proc.wait()


def wait_until(predicate, timeout: float, what: str, procs: list) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - a service not up yet: ask again
            pass
        dead = [label for label, proc in procs if proc.poll() is not None]
        if dead:
            raise SystemExit(f"{', '.join(dead)} exited while waiting for {what} (logs in the temp dir)")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        eventlet.sleep(0.2)


def wait_ready(rpc, lines: list[Line], procs: list) -> None:
    """Every line's PLC connected and its controller's recovery check done."""
    deadline = time.monotonic() + 90 + 30 * len(lines)
    for line in lines:
        hardware, controller = getattr(rpc, line.names.hardware), getattr(rpc, line.names.line_controller)
        wait_until(lambda hw=hardware: hw.plc_state()["connected"], deadline - time.monotonic(),
                   f"{line.id}'s PLC", procs)
        wait_until(lambda lc=controller: not lc.status()["recovering"], deadline - time.monotonic(),
                   f"{line.id}'s controller", procs)


def command(rpc, line: Line, type_: str, payload: dict, wait: float) -> dict:
    reply = getattr(rpc, line.names.line_controller).command(type_, payload, "bench", wait_seconds=wait)
    if reply.get("status") not in ("HANDLED", "QUEUED"):
        raise SystemExit(f"{line.id}: {type_} answered {reply}")
    return reply


def show_logs(directory: Path, tail: int = 30) -> None:
    for log in sorted(directory.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-tail:]
        if lines:
            print(f"--- {log.name}", *lines, sep="\n", file=sys.stderr)
