"""Hostile input against every POST route and the list queries: every request
gets a 4xx, never a 5xx, and nothing changes (no row in any table, no event)."""

from __future__ import annotations

import base64
import json

import pytest
from sqlalchemy import text

from tests.gateway.conftest import ADMIN

HEADERS = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}

POST_ROUTES = [
    "/api/work-orders", "/api/work-orders/1/start", "/api/work-orders/1/pause", "/api/work-orders/1/resume",
    "/api/work-orders/1/cancel", "/api/jobs/1/suspend", "/api/jobs/1/resume", "/api/jobs/1/rework",
    "/api/manual-actions/1/resolve", "/api/recovery/confirm", "/api/alarms/1/acknowledge",
    "/api/ai/snapshots", "/api/ai/credentials", "/api/ai/jobs", "/api/ai/jobs/j1/cancel",
    "/api/ai/users/u1/revoke", "/api/admin/ai/jobs/j1/rerun",
    "/internal/runtime/jobs/poll", "/internal/runtime/jobs/j1/lock", "/internal/runtime/jobs/j1/heartbeat",
    "/internal/runtime/jobs/j1/result",
]

DEEP = 100_000
HOSTILE_BODIES = {
    "deep array": b"[" * DEEP + b"]" * DEEP,
    "deep object": b'{"a":' * DEEP + b"1" + b"}" * DEEP,
    "deep inside a field": b'{"note": ' + b"[" * DEEP + b"]" * DEEP + b"}",
    "deep but parseable": b'{"params": ' + b'{"a":' * 60 + b"1" + b"}" * 60 + b"}",
    "huge integer": b'{"quantity": ' + b"9" * 5000 + b"}",
    "integer beyond 64 bits": b'{"priority": 18446744073709551616, "attemptNo": 18446744073709551616}',
    "NUL in a string": b'{"note": "a\\u0000b", "userId": "a\\u0000b", "runtimeInstanceId": "r\\u0000"}',
    "NUL in a key": b'{"a\\u0000b": 1}',
    "lone surrogate": b'{"note": "\\ud800", "userId": "\\udfff", "runtimeInstanceId": "\\ud800"}',
    "NaN": b'{"params": NaN, "data": {"x": NaN}}',
    "Infinity": b'{"params": {"x": Infinity}, "data": {"x": -Infinity}}',
    "overflowing float": b'{"data": {"x": 1e999}, "params": {"x": -1e999}}',
    "not UTF-8": b'{"note": "\xff\xfe"}',
    "UTF-16": '{"note": "x"}'.encode("utf-16"),
    "byte-order mark": b"\xef\xbb\xbf{}",
    "not an object": b"[1, 2, 3]",
    "a bare string": b'"x"',
    "truncated": b'{"note": "x',
    "claim as a string": b'{"runtimeInstanceId": "r", "capabilities": ["quiz_generation"], "claim": "yes"}',
    "claim as a number": b'{"runtimeInstanceId": "r", "capabilities": ["quiz_generation"], "claim": 1}',
}

GETS = [
    "/api/ai/jobs/a%00b", "/api/ai/jobs?userId=a%00b", "/api/ai/jobs?cursor=" +
    base64.urlsafe_b64encode(b"not-a-time|x").decode(),
    "/api/ai/jobs?cursor=" + base64.urlsafe_b64encode(b"2026-13-45T99:00:00|x").decode(),
    "/api/ai/jobs?cursor=" + base64.urlsafe_b64encode(b"2026-01-01T00:00:00+00:00|\x00").decode(),
    "/api/ai/jobs?cursor=!!!!", "/api/ai/jobs?cursor=" + base64.urlsafe_b64encode(b"\xff\xfe|x").decode(),
    "/api/ai/jobs?limit=99999999999999999999999", "/api/ai/jobs?status=%00",
    "/api/work-orders?cursor=99999999999999999999999999", "/api/work-orders?cursor=abc",
    "/api/work-orders?status=%00", "/api/jobs?workOrderId=1e999", "/api/events?after=-1",
    "/api/events?after=%00", "/api/tasks?limit=NaN", "/internal/runtime/snapshots/a%00b?runtimeInstanceId=r&jobId=j",
    "/internal/runtime/snapshots/s?runtimeInstanceId=r%00&jobId=j",
]


def state(maker) -> dict:
    with maker() as s:
        tables = s.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                                " AND tablename NOT LIKE 'mq\\_%' AND tablename <> 'alembic_version'"
                                " ORDER BY 1")).scalars().all()
        counts = {t: s.execute(text(f'SELECT count(*) FROM "{t}"')).scalar() for t in tables}
        counts["event_log.max_seq"] = s.execute(text("SELECT COALESCE(max(seq), 0) FROM event_log")).scalar()
        counts["ai.updated"] = str(s.execute(text("SELECT max(updated_at) FROM ai_runtime_job")).scalar())
        counts["work_order.updated"] = str(s.execute(text("SELECT max(updated_at) FROM work_order")).scalar())
    return counts


@pytest.fixture
def ai_job(writable):
    with writable() as s, s.begin():
        s.execute(text("INSERT INTO ai_runtime_job (id, user_id, job_type, target_type, target_id,"
                       " output_schema_version) VALUES ('j1', 'u1', 'quiz_generation', 'user', 't', '1')"))


def test_hostile_input_never_5xx_and_changes_nothing(client, writable, ai_job):
    before = state(writable)
    wrong = []
    for route in POST_ROUTES:
        for name, body in HOSTILE_BODIES.items():
            r = client.post(route, data=body, headers=HEADERS)
            if not 400 <= r.status_code < 500 or r.get_json()["error"]["code"] not in (
                    "VALIDATION_ERROR", "PAYLOAD_TOO_LARGE", "NOT_FOUND"):
                wrong.append((route, name, r.status_code, r.get_data(as_text=True)[:200]))
    for path in GETS:
        r = client.get(path, headers=HEADERS)
        if not 400 <= r.status_code < 500:
            wrong.append(("GET", path, r.status_code, r.get_data(as_text=True)[:200]))
    for path in ("/api/ai/jobs/a%00b/cancel", "/internal/runtime/jobs/a%00b/lock", "/api/ai/users/%00/revoke"):
        r = client.post(path, json={"runtimeInstanceId": "r"}, headers=HEADERS)
        if r.status_code != 400:
            wrong.append(("POST", path, r.status_code, r.get_data(as_text=True)[:200]))
    assert wrong == []
    assert state(writable) == before


def test_refusals_name_the_field(client, ai_job):
    r = client.post("/api/ai/jobs", data=b'{"userId": "a\\u0000b"}', headers=HEADERS)
    assert r.status_code == 400 and r.get_json()["error"]["message"].startswith("userId:")
    r = client.post("/api/ai/snapshots", data=b'{"data": {"deep": {"x": NaN}}}', headers=HEADERS)
    assert r.status_code == 400 and "NaN" in r.get_json()["error"]["message"]
    r = client.post("/api/work-orders", data=b'{"quantity": 99999999999999999999}', headers=HEADERS)
    assert r.status_code == 400 and "64 bits" in r.get_json()["error"]["message"]


BEYOND_64_BITS = (str(2**64), str(-(2**63) - 1), "9" * 5000)  # literals, as a client writes them
JOB = {"userId": "u1", "jobType": "quiz_generation", "targetType": "user", "targetId": "t1"}
POLL = {"runtimeInstanceId": "r", "capabilities": ["quiz_generation"]}
# (field, route, the body around it); None: the field is a query parameter
NAMED_INTEGERS = [
    ("quantity", "/api/work-orders", {"productId": "SHAFT-B"}),
    ("priority", "/api/work-orders", {"productId": "SHAFT-B", "quantity": 1}),
    ("priority", "/api/ai/jobs", JOB),
    ("maxRetryCount", "/api/ai/jobs", JOB),
    ("timeoutSeconds", "/api/ai/jobs", JOB),
    ("limit", "/internal/runtime/jobs/poll", POLL),
    ("attemptNo", "/internal/runtime/jobs/j1/heartbeat", {"runtimeInstanceId": "r"}),
    ("attemptNo", "/internal/runtime/jobs/j1/result", {"runtimeInstanceId": "r", "status": "failed"}),
    ("limit", "/api/ai/jobs", None),
    ("limit", "/api/work-orders", None),
    ("after", "/api/events", None),
]


@pytest.mark.parametrize(("field", "route", "around"), [
    pytest.param(*case, id=f"{case[0]} {'query' if case[2] is None else 'body'} {case[1]}") for case in NAMED_INTEGERS])
def test_an_integer_beyond_64_bits_is_refused_naming_its_field(client, ai_job, field, route, around):
    for value in BEYOND_64_BITS:
        if around is None:
            r = client.get(f"{route}?{field}={value}", headers=HEADERS)
        else:
            body = json.dumps({**around, field: 0}).replace(f'"{field}": 0', f'"{field}": {value}')
            r = client.post(route, data=body, headers=HEADERS)
        assert r.status_code == 400, (field, r.get_data(as_text=True)[:200])
        error = r.get_json()["error"]
        assert error["code"] == "VALIDATION_ERROR" and error["message"].startswith(f"{field}:"), error


def test_a_body_over_1_mib_is_413(client):
    r = client.post("/api/ai/snapshots", data=b'{"data": "' + b"x" * (1024 * 1024 + 10) + b'"}', headers=HEADERS)
    assert r.status_code == 413 and r.get_json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


def test_every_response_carries_the_security_headers(client):
    for path in ("/", "/api/work-orders", "/healthz", "/static/app.js", "/nope"):
        r = client.get(path, headers={"Authorization": HEADERS["Authorization"]})
        assert r.headers["X-Content-Type-Options"] == "nosniff", path
        assert r.headers["Referrer-Policy"] == "no-referrer", path
        csp = r.headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
