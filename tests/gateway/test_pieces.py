"""Piece traceability's API (PRODUCT.md, "Piece traceability"): a line's pieces
by serial, order, status, time and machine, paged by an opaque keyset cursor,
a piece's whole record by its serial, a serial found on any line of the plant,
and the CSV of 100 000 pieces streamed by the served gateway in bounded memory.
The records here are generated with SQL (the loop's writing them is
tests/flow's): what is tested is the reading."""

from __future__ import annotations

import csv
import io
import threading
from datetime import UTC, datetime, timedelta

import requests
from sqlalchemy import text

from tests.gateway.conftest import AUTH

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
BASE = 10**9  # job ids of generated pieces, far from the seeded line's


def generate(maker, n: int, *, base: int = BASE) -> None:
    """``n`` finished pieces, one a second from T0, each machined on MC1 or MC2
    (alternately, 40 s) then inspected on INSP1, with one robot move."""
    with maker() as s, s.begin():
        s.execute(text(
            "INSERT INTO piece (job_id, serial, work_order_id, work_order_code, product_id, status, created_at, "
            "  finished_at) SELECT :b + g, 'SN-GEN-' || g, 1 + g / 1000, 'WO-GEN-' || (1 + g / 1000), 'SHAFT-B', "
            "  CASE WHEN g % 10 = 0 THEN 'SCRAPPED' ELSE 'COMPLETED' END, :t0 + g * interval '1 second', "
            "  :t0 + g * interval '1 second' + interval '90 seconds' FROM generate_series(1, :n) AS g"),
            {"b": base, "n": n, "t0": T0})
        s.execute(text(
            "INSERT INTO piece_step (job_id, step_index, kind, equipment_id, slot_no, started_at, ended_at, result, "
            "  values) SELECT :b + g, k, CASE k WHEN 0 THEN 'machining' ELSE 'inspection' END, "
            "  CASE k WHEN 0 THEN 'MC' || (1 + g % 2) ELSE 'INSP1' END, 1, "
            "  :t0 + g * interval '1 second' + k * interval '45 seconds', "
            "  :t0 + g * interval '1 second' + k * interval '45 seconds' + interval '40 seconds', "
            "  CASE WHEN k = 0 THEN 'DONE' WHEN g % 10 = 0 THEN 'FAIL' ELSE 'PASS' END, '{}'::jsonb "
            "FROM generate_series(1, :n) AS g, generate_series(0, 1) AS k"), {"b": base, "n": n, "t0": T0})
        s.execute(text(
            "INSERT INTO piece_entry (job_id, category, at, detail) SELECT :b + g, 'move', "
            "  :t0 + g * interval '1 second', jsonb_build_object('kind', 'DOCK_TO_BUFFER', 'result', 'SUCCEEDED') "
            "FROM generate_series(1, :n) AS g"), {"b": base, "n": n, "t0": T0})


def test_pieces_are_found_by_serial_order_status_time_and_machine_and_paged(client, writable):
    generate(writable, 30)
    r = client.get("/api/pieces/SN-GEN-7", headers=AUTH)
    assert r.status_code == 200, r.get_json()
    piece = r.get_json()
    assert (piece["serial"], piece["lineId"], piece["status"], piece["workOrderCode"]) == (
        "SN-GEN-7", "demo-cell", "COMPLETED", "WO-GEN-1")
    assert [(s["stepIndex"], s["equipmentId"], s["result"]) for s in piece["steps"]] == [
        (0, "MC2", "DONE"), (1, "INSP1", "PASS")]
    assert [m["kind"] for m in piece["moves"]] == ["DOCK_TO_BUFFER"] and piece["answers"] == []
    assert client.get("/api/lines/demo-cell/pieces/SN-GEN-7", headers=AUTH).get_json() == piece
    assert client.get("/api/pieces/SN-NONE", headers=AUTH).status_code == 404

    scrapped = client.get("/api/pieces?status=SCRAPPED", headers=AUTH).get_json()
    assert [p["serial"] for p in scrapped["items"]] == ["SN-GEN-10", "SN-GEN-20", "SN-GEN-30"]
    # pages of 7 follow one another without gap or repeat, and a cursor is the API's own
    serials, cursor = [], None
    while True:
        page = client.get("/api/pieces?limit=7" + (f"&cursor={cursor}" if cursor else ""), headers=AUTH).get_json()
        serials += [p["serial"] for p in page["items"] if p["serial"].startswith("SN-GEN-")]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert serials == [f"SN-GEN-{g}" for g in range(1, 31)]
    for bad in ("12", "x_1", "99999999999999999999_1"):
        r = client.get(f"/api/pieces?cursor={bad}", headers=AUTH)
        assert r.status_code == 400 and r.get_json()["error"]["code"] == "VALIDATION_ERROR", bad
    assert client.get("/api/pieces?status=BROKEN", headers=AUTH).status_code == 400
    assert client.get("/api/pieces?from=2026-03-02T00:00:00Z&to=2026-03-01T00:00:00Z",
                      headers=AUTH).status_code == 400

    # what else ran on MC1 around piece 7's step there (08:00:07..08:00:47): pieces 6 and 8's
    # cycles on MC1 overlap it; MC2's and INSP1's do not count
    window = "from=2026-03-01T08:00:20Z&to=2026-03-01T08:00:30Z"
    around = client.get(f"/api/pieces?equipmentId=MC1&{window}", headers=AUTH).get_json()["items"]
    on_mc1 = [g for g in range(1, 31) if g % 2 == 0 and 20 - 40 < g < 30]
    assert [p["serial"] for p in around] == [f"SN-GEN-{g}" for g in on_mc1]
    assert all(s["equipmentId"] == "MC1" for p in around for s in p["steps"])
    created = client.get("/api/pieces?from=2026-03-01T08:00:10Z&to=2026-03-01T08:00:13Z", headers=AUTH)
    assert [p["serial"] for p in created.get_json()["items"]] == ["SN-GEN-10", "SN-GEN-11", "SN-GEN-12"]

    plant = client.get("/api/plant/pieces?serial=SN-GEN-7", headers=AUTH).get_json()
    assert [(p["serial"], p["lineId"]) for p in plant["items"]] == [("SN-GEN-7", "demo-cell")]
    assert client.get("/api/plant/pieces", headers=AUTH).status_code == 400


def test_the_csv_of_100000_pieces_streams_in_bounded_memory(gateway_server, writable):
    n = 100_000
    generate(writable, n)
    server = gateway_server()
    (pid,) = server.worker_pids()

    def rss_kib() -> int:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

    # warm: the first request loads what every request uses
    assert requests.get(server.base + "/api/pieces?limit=1", headers=AUTH, timeout=30).status_code == 200
    baseline, peak, done = rss_kib(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib())
            done.wait(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    size, rows = 0, 0
    try:
        with requests.get(server.base + "/api/pieces", headers={**AUTH, "Accept": "text/csv"}, stream=True,
                          timeout=120) as r:
            assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
            tail = ""
            for chunk in r.iter_content(chunk_size=1 << 16, decode_unicode=True):
                size += len(chunk)
                lines = (tail + chunk).split("\r\n")
                tail = lines.pop()
                rows += len(lines)
                if rows == 1:
                    header = next(csv.reader(io.StringIO(lines[0])))
                    assert header[:3] == ["lineId", "serial", "jobId"]
    finally:
        done.set()
        sampler.join()
    assert rows - 1 >= n  # the seeded line's own pieces, if any, too
    growth_mib = (peak[0] - baseline) / 1024
    print(f"CSV of {rows - 1} pieces: {size / 2**20:.1f} MiB streamed; gateway RSS {baseline / 1024:.0f} MiB, "
          f"peak +{growth_mib:.1f} MiB")
    assert size > 30 * 2**20
    assert growth_mib < 20, f"the gateway grew {growth_mib:.1f} MiB streaming {size / 2**20:.0f} MiB"


def test_a_window_is_a_half_open_interval_of_creation(client, writable):
    generate(writable, 3)
    start = T0 + timedelta(seconds=2)
    items = client.get(f"/api/pieces?from={start.isoformat()}&to={(start + timedelta(seconds=1)).isoformat()}"
                       .replace("+", "%2B"), headers=AUTH).get_json()["items"]
    assert [p["serial"] for p in items] == ["SN-GEN-2"]
