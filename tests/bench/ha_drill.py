"""The failover drill (``make ha-drill``; not in ``make test``): etcd and two
Patroni nodes from the machine's packages (Debian's ``etcd-server``, ``patroni``,
``postgresql-15``), started here in a temporary directory, in synchronous mode;
``linectl up`` on a multi-host URL naming both. An order runs; the leader's
postmaster and backends are killed (``kill -9``) mid-order; Patroni promotes the
standby by itself, and every process follows it. The order must complete with
exact counts, each seq gapless, nobody asked anything, no process restarted.
Then the old leader rejoins as a standby and a second failover, back, runs the
next order. Prints the figures of each failover (issue 40's table)."""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psycopg2  # noqa: E402

from tests.ops.operator import loop_status  # noqa: E402
from tests.ops.stack import Stack  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SUPERUSER_PASSWORD = "drill-superuser-0001"
NODE_CONFIG = """\
scope: linectl-drill
name: {name}
restapi:
  listen: 127.0.0.1:{api}
  connect_address: 127.0.0.1:{api}
etcd3:
  hosts: 127.0.0.1:{etcd}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 0
    synchronous_mode: true
    synchronous_mode_strict: false
    postgresql:
      use_pg_rewind: true
      parameters:
        max_connections: 300
        wal_log_hints: "on"
        fsync: "off"
  initdb:
    - encoding: UTF8
    - locale: C
  pg_hba:
    - local all all trust
    - host replication replicator 127.0.0.1/32 scram-sha-256
    - host all all 127.0.0.1/32 scram-sha-256
postgresql:
  listen: 127.0.0.1:{port}
  connect_address: 127.0.0.1:{port}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {root}/pgpass-{name}
  parameters:
    unix_socket_directories: {root}
  authentication:
    superuser: {{username: postgres, password: {password}}}
    replication: {{username: replicator, password: {password}}}
    rewind: {{username: rewinder, password: {password}}}
"""


def as_postgres():
    pw = pwd.getpwnam("postgres")
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)


class Cluster:
    def __init__(self, root: Path):
        self.root = root
        self.etcd_port, self.etcd_peer = free_port(), free_port()
        self.nodes = {name: {"port": free_port(), "api": free_port()} for name in ("db1", "db2")}
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self) -> Cluster:
        shutil.chown(self.root, "postgres", "postgres")
        self.procs["etcd"] = subprocess.Popen(
            ["etcd", "--data-dir", str(self.root / "etcd"), "--name", "drill",
             "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{self.etcd_peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.etcd_peer}",
             "--initial-cluster", f"drill=http://127.0.0.1:{self.etcd_peer}"],
            stdout=open(self.root / "etcd.log", "wb"), stderr=subprocess.STDOUT, preexec_fn=as_postgres)
        for name in self.nodes:
            self.start_node(name)
            if name == "db1":
                wait_for(lambda: self.leader() == "db1", 90, 0.5, "db1 leading")
        wait_for(self.synchronous, 90, 0.5, "a synchronous standby")
        return self

    def start_node(self, name: str) -> None:
        node = self.nodes[name]
        config = self.root / f"{name}.yml"
        config.write_text(NODE_CONFIG.format(name=name, api=node["api"], etcd=self.etcd_port, port=node["port"],
                                             data=self.root / name, bin=PG_BIN, root=self.root,
                                             password=SUPERUSER_PASSWORD))
        shutil.chown(config, "postgres", "postgres")
        self.procs[name] = subprocess.Popen(["patroni", str(config)], stdout=open(self.root / f"{name}.log", "ab"),
                                            stderr=subprocess.STDOUT, preexec_fn=as_postgres)

    def members(self) -> list[dict]:
        for node in self.nodes.values():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{node['api']}/cluster", timeout=2) as r:
                    return json.load(r)["members"]
            except OSError:
                continue
        return []

    def leader(self) -> str | None:
        return next((m["name"] for m in self.members() if m["role"] == "leader" and m["state"] == "running"),
                    None)

    def synchronous(self) -> bool:
        return any(m["role"] == "sync_standby" and m["state"] in ("running", "streaming") for m in self.members())

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{n['port']}" for n in self.nodes.values())
        return (f"postgresql://postgres:{SUPERUSER_PASSWORD}@{hosts}/linectl"
                "?target_session_attrs=read-write&connect_timeout=2")

    def create_database(self) -> None:
        port = self.nodes[self.leader()]["port"]
        conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", password=SUPERUSER_PASSWORD,
                                dbname="postgres")
        conn.autocommit = True
        conn.cursor().execute("CREATE DATABASE linectl")
        conn.close()

    def kill_postgres(self, name: str) -> None:
        """``kill -9`` of the node's postmaster and backends, and of its Patroni (a dead machine)."""
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(10)
        pid = int((self.root / name / "postmaster.pid").read_text().split()[0])
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        for p in [pid, *map(int, children)]:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        subprocess.run(["pkill", "-9", "-f", "--", f"-D {self.root}"], check=False)


def last_seq(url: str) -> int | None:
    """The event log's last seq on whichever server takes writes; None while none answers."""
    try:
        conn = psycopg2.connect(url)
    except psycopg2.Error:
        return None
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT coalesce(max(seq), 0) FROM event_log")
            return cur.fetchone()[0]
    except psycopg2.Error:
        return None
    finally:
        conn.close()


def run_order(stack: Stack, token: str, quantity: int) -> int:
    code, order = stack.request("POST", "/api/work-orders", {"productId": "SHAFT-B", "quantity": quantity},
                                token, timeout=30)
    assert code == 201, order
    code, body = stack.request("POST", f"/api/work-orders/{order['id']}/start", {}, token, timeout=30)
    assert code == 200, body
    return order["id"]


def fail_over(cluster: Cluster, stack: Stack, token: str, order_id: int, quantity: int) -> dict:
    leader = cluster.leader()
    wait_for(lambda: stack.get(f"/api/work-orders/{order_id}", token)[1].get("completedQty", 0) >= 2,
             120, 0.2, "two pieces done")
    pids = {name: stack.process(name) for name in ("line_controller", "hardware", "gateway")}
    seq_before = last_seq(cluster.url)
    transport = "pgsql://" + cluster.url.split("://", 1)[1]  # the stack's, with the password it masks
    duplicates_before = loop_status(transport)["duplicatesTotal"]
    statuses: dict[int, int] = {}
    died = time.monotonic()
    cluster.kill_postgres(leader)
    first_event = ready = None
    while first_event is None or ready is None:
        code, _ = stack.get("/api/work-orders", token, timeout=5)
        statuses[code] = statuses.get(code, 0) + 1
        if ready is None and stack.ready():
            ready = time.monotonic() - died
        if first_event is None and (last_seq(cluster.url) or 0) > seq_before:
            first_event = time.monotonic() - died
        if time.monotonic() - died > 120:
            tail = "\n".join(stack.lines[-80:])
            raise AssertionError(f"no new primary within 2 minutes: members {cluster.members()}, "
                                 f"first event {first_event}, the stack said:\n{tail}\n"
                                 f"/readyz {stack.get('/readyz', timeout=5)}, last seq {last_seq(cluster.url)}")
        time.sleep(0.1)
    try:
        wait_for(lambda: stack.get(f"/api/work-orders/{order_id}", token)[1].get("status") == "COMPLETED",
                 300, 0.5, f"order {order_id} complete")
    except AssertionError:
        said = [line for line in stack.lines if "WARNING" in line or "ERROR" in line or "recovery" in line]
        raise AssertionError(f"order {order_id}: {stack.get(f'/api/work-orders/{order_id}', token)}, "
                             f"open: {stack.get('/api/manual-actions?status=OPEN', token)}, "
                             f"first event {first_event} s, ready {ready} s, the stack said:\n"
                             + "\n".join(said[-60:])) from None
    order = stack.get(f"/api/work-orders/{order_id}", token)[1]
    asked = stack.get("/api/manual-actions?status=OPEN", token)[1].get("items", [])
    same = {name: stack.process(name) for name in pids} == pids
    # a redelivery of a message the loop had handled is a duplicate it drops
    redelivered = loop_status(transport)["duplicatesTotal"] - duplicates_before
    return {"from": leader, "to": cluster.leader(), "first_event_s": round(first_event, 2),
            "readyz_200_s": round(ready, 2), "answers": statuses,
            "exact": order["completedQty"] + order["scrappedQty"] == quantity,
            "asked": [a["kind"] for a in asked], "same_processes": same,
            "500s": statuses.get(500, 0), "redelivered_handled": redelivered}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quantity", type=int, default=12)
    parser.add_argument("--sim-speed", type=float, default=20.0)
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("patroni") or not shutil.which("etcd") or not PG_BIN.is_dir():
        print("the drill needs root (to run PostgreSQL as postgres), patroni, etcd and postgresql-15")
        return 2
    root = Path(tempfile.mkdtemp(prefix="linectl-ha-drill-"))
    cluster = Cluster(root)
    stack = None
    try:
        cluster.start()
        cluster.create_database()
        data = root / "stack"
        data.mkdir()
        stack = Stack(data, {}, sim_speed=args.sim_speed)
        stack.env["LINECTL_DATABASE_URL"] = cluster.url
        stack.up().wait_ready(180)
        token = stack.token()
        results = []
        for _ in range(2):  # over, then back once the old leader has rejoined
            order_id = run_order(stack, token, args.quantity)
            results.append(fail_over(cluster, stack, token, order_id, args.quantity))
            old = results[-1]["from"]
            cluster.start_node(old)
            wait_for(cluster.synchronous, 180, 1.0, f"{old} back as a synchronous standby")
        for r in results:
            print(json.dumps(r))
        broken = [r for r in results if not r["exact"] or r["asked"] or not r["same_processes"] or r["500s"]]
        print("drill:", "FAILED" if broken else "passed")
        return 1 if broken else 0
    except BaseException:
        if stack is not None:  # the whole story, for whoever reads the failure
            kept = Path(tempfile.gettempdir()) / f"linectl-ha-drill-{os.getpid()}.log"
            kept.write_text("\n".join(stack.lines) + "\n")
            print(f"the stack's whole log: {kept}")
        raise
    finally:
        if stack is not None:
            stack.cleanup()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
