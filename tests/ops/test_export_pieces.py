"""``linectl export pieces`` (PRODUCT.md, "Piece traceability"): the records of the
pieces made in a window, to an archive file, as a real ``linectl`` process: JSON
Lines (whole records) or CSV (the rows ``Accept: text/csv`` gives), a progress bar
on a terminal only, and a bad window refused with one line."""

from __future__ import annotations

import csv
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import psycopg2

REPO = Path(__file__).resolve().parents[2]


def _generate(url: str, n: int) -> None:
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "INSERT INTO piece (job_id, serial, work_order_id, work_order_code, product_id, status, created_at,"
                " finished_at) SELECT 800000 + g, 'SN-EXP-' || g, 1, 'WO-EXP', 'SHAFT-B', 'COMPLETED',"
                " timestamptz '2026-04-01 00:00Z' + g * interval '1 hour', timestamptz '2026-04-01 00:30Z'"
                " + g * interval '1 hour' FROM generate_series(0, %s - 1) AS g;"
                "INSERT INTO piece_step (job_id, step_index, kind, equipment_id, slot_no, started_at, ended_at, result)"
                " SELECT 800000 + g, 0, 'inspection', 'INSP1', 1, timestamptz '2026-04-01 00:05Z' + g * interval"
                " '1 hour', timestamptz '2026-04-01 00:10Z' + g * interval '1 hour', 'PASS'"
                " FROM generate_series(0, %s - 1) AS g", (n, n))
    finally:
        conn.close()


def export(db_url, tmp_path, *args, stderr=subprocess.PIPE):
    env = {**os.environ, "LINECTL_DATABASE_URL": db_url, "LINECTL_DATA_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "services.stack.cli", "export", "pieces", *args], env=env, cwd=REPO,
                          stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=120)


def test_an_export_writes_the_windows_records_as_jsonl_or_csv(db_url, tmp_path):
    _generate(db_url, 48)  # one an hour over two days
    jsonl = tmp_path / "day.jsonl"
    out = export(db_url, tmp_path, "--from", "2026-04-01T00:00:00Z", "--to", "2026-04-02T00:00:00Z",
                 "--format", "jsonl", "--output", str(jsonl))
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # no terminal: no progress bar
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["serial"] for r in records] == [f"SN-EXP-{g}" for g in range(24)]
    assert records[0]["lineId"] == "demo-cell"
    assert records[0]["steps"][0]["equipmentId"] == "INSP1" and records[0]["steps"][0]["result"] == "PASS"
    assert not list(tmp_path.glob("*.partial"))

    table = tmp_path / "day.csv"
    out = export(db_url, tmp_path, "--from", "2026-04-01T12:00:00", "--to", "2026-04-01T14:00:00",
                 "--format", "csv", "--output", str(table))
    assert out.returncode == 0 and f"{table}: 2 pieces" in out.stdout, out.stderr
    rows = list(csv.DictReader(table.open()))
    assert [r["serial"] for r in rows] == ["SN-EXP-12", "SN-EXP-13"]
    assert json.loads(rows[0]["steps"])[0]["kind"] == "inspection"

    refused = export(db_url, tmp_path, "--from", "2026-04-02T00:00:00Z", "--to", "2026-04-01T00:00:00Z")
    assert refused.returncode == 2 and "--from" in refused.stderr


def test_a_terminal_sees_a_progress_bar(db_url, tmp_path):
    _generate(db_url, 5)
    master, slave = pty.openpty()
    try:
        out = export(db_url, tmp_path, "--from", "2026-04-01T00:00:00Z", "--to", "2026-04-02T00:00:00Z",
                     "--output", str(tmp_path / "p.csv"), stderr=slave)
        os.close(slave)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
    assert out.returncode == 0
    assert b"] 5/5 pieces" in shown and b"[" + b"#" * 30 + b"]" in shown, shown
