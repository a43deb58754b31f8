"""The runtime's lean path (``gateway.runtime_lean``) answers as the Flask views
it stands in front of: the same status, code and message for every refusal,
the same answers along a whole job, the same headers and metrics."""

from __future__ import annotations

import json

import pytest

from tests.ai.conftest import ADMIN, OPERATOR, RUNTIME, Api

JSON = {"Content-Type": "application/json"}
POLL = "/internal/runtime/jobs/poll"
LOCK = "/internal/runtime/jobs/{job}/lock"
BEAT = "/internal/runtime/jobs/{job}/heartbeat"
RESULT = "/internal/runtime/jobs/{job}/result"
HASH = "0" * 64


def poll(**fields):
    """A poll (runtime "r", capabilities ["quiz_generation"]) but for ``fields``."""
    body = {"runtimeInstanceId": "r", "capabilities": ["quiz_generation"], **fields}
    return POLL, json.dumps(body).encode(), JSON


def result(**fields):
    """A result of runtime "r" for attempt 1 of an unknown job, with ``fields``."""
    return RESULT.format(job="nope"), json.dumps({"runtimeInstanceId": "r", "attemptNo": 1, **fields}).encode(), JSON


SUCCEEDED = {"status": "succeeded", "output": {}, "outputHash": HASH}
FAILED = {"status": "failed", "errorCode": "JOB_TIMEOUT"}
# (path, raw body, headers beside the runtime token's)
REFUSALS = [
    (POLL, b"", JSON), (POLL, b"{", JSON), (POLL, b"[]", JSON), (POLL, b'"x"', JSON), (POLL, b"{}", JSON),
    (POLL, b'{"runtimeInstanceId": "r"}', JSON),
    *(poll(runtimeInstanceId=bad) for bad in ("", 5, None, "r" * 201, "r\u0000")),
    *(poll(capabilities=bad) for bad in ([], "quiz_generation", ["nope"], [1])),
    *(poll(limit=bad) for bad in (0, 51, "5", 2.5, 99999999999999999999)),
    poll(claim="true"), poll(claim=1), poll(extra=1),
    *(poll(serves=bad) for bad in ([], [{}], [{"modelProvider": "x", "apiKeyModes": ["nope"]}],
                                   [{"modelProvider": "x", "other": 1}])),
    (*poll()[:2], {"Content-Type": "text/plain"}),
    (*poll()[:2], {"Content-Type": "application/json; charset=latin-1"}),
    (LOCK.format(job="nope"), b'{"runtimeInstanceId": "r"}', JSON),
    (LOCK.format(job="nope"), b'{}', JSON),
    (LOCK.format(job="nope"), b'{"runtimeInstanceId": "r", "attemptNo": 1}', JSON),
    (LOCK.format(job="a%00b"), b'{"runtimeInstanceId": "r"}', JSON),
    (BEAT.format(job="nope"), b'{"runtimeInstanceId": "r"}', JSON),
    (BEAT.format(job="nope"), b'{"runtimeInstanceId": "r", "attemptNo": 0}', JSON),
    (BEAT.format(job="nope"), b'{"runtimeInstanceId": "r", "attemptNo": true}', JSON),
    (BEAT.format(job="nope"), b'{"runtimeInstanceId": "r", "attemptNo": 1}', JSON),
    result(), result(status="done"), result(status="succeeded"),
    result(**{**SUCCEEDED, "output": None}), result(**{**SUCCEEDED, "outputHash": "XYZ"}),
    result(status="succeeded", output={}), result(**SUCCEEDED, errorCode="JOB_TIMEOUT"),
    result(status="failed"), result(**{**FAILED, "errorCode": "NOPE"}), result(**FAILED, output={}),
    result(**FAILED, errorMessage=None), result(**FAILED, errorMessage=5),
]


def answer(response):
    body = response.get_json(silent=True)
    return response.status_code, body


@pytest.fixture
def lean(gateway):
    return gateway.wsgi_app


def both(client, lean, method_path, body, headers):
    answers = []
    for enabled in (True, False):
        lean.enabled = enabled
        answers.append(answer(client.post(method_path, data=body, headers={**RUNTIME, **headers})))
    lean.enabled = True
    return answers


def test_every_refusal_is_the_flask_views_refusal(gateway, api, lean):
    client = gateway.test_client()
    differ = []
    for path, body, headers in REFUSALS:
        fast, flask = both(client, lean, path, body, headers)
        if fast != flask:
            differ.append((path, body[:80], fast, flask))
    assert differ == []


def test_who_may_call_is_the_same(gateway, api, lean):
    def answers(client, auth) -> list:
        got = []
        for enabled in (True, False):
            lean.enabled = enabled
            r = client.post(POLL, json={"runtimeInstanceId": "r", "capabilities": ["quiz_generation"]},
                            headers=auth)
            got.append((r.status_code, r.get_json(), r.headers.get("WWW-Authenticate")))
        lean.enabled = True
        return got

    for auth in ({}, {"Authorization": "Bearer nope"}, OPERATOR, ADMIN):
        fast, flask = answers(gateway.test_client(), auth)
        assert fast == flask, auth
    # A session cookie without a token is gateway.auth's to judge (here an ended session).
    signed_in = gateway.test_client()
    signed_in.set_cookie("linectl_session", "ended")
    fast, flask = answers(signed_in, {})
    assert fast == flask


def test_a_whole_job_answers_the_same(gateway, api: Api, lean):
    client = gateway.test_client()
    runs = []
    for enabled in (True, False):
        lean.enabled = enabled
        job = api.create()["id"]
        polled = api.poll(rid=f"rt-{enabled}")
        locked = api.lock(job, rid=f"rt-{enabled}")
        again = api.lock(job, rid="other")
        beat = api.heartbeat(job, rid=f"rt-{enabled}", attempt=1)
        done = api.succeed(job, 1, rid=f"rt-{enabled}")
        repeat = api.succeed(job, 1, rid=f"rt-{enabled}")
        lost = api.heartbeat(job, rid=f"rt-{enabled}", attempt=1)
        item = polled.get_json()["jobs"][0]
        runs.append({
            "poll": (polled.status_code, sorted(item), item["id"] == job),
            "lock": (locked.status_code, sorted(locked.get_json()), locked.get_json()["attemptNo"]),
            "again": (again.status_code, again.get_json()["error"]["code"]),
            "beat": (beat.status_code, beat.get_data()),
            "done": (done.status_code, sorted(done.get_json()), done.get_json()["duplicate"]),
            "repeat": (repeat.status_code, repeat.get_json()["duplicate"]),
            "lost": (lost.status_code, lost.get_json()["error"]["code"]),
            "headers": sorted(k for k in polled.headers.keys() if k != "Content-Length"),
        })
    lean.enabled = True
    assert runs[0] == runs[1]
    assert runs[0]["beat"] == (204, b"")
    del client


def test_the_lean_path_counts_its_requests(gateway, api, lean):
    metrics = gateway.extensions["linectl"].metrics
    rule = "/internal/runtime/jobs/<job_id>/lock"
    before = metrics.requests.labels("POST", rule, "404")._value.get()
    api.lock("nope")
    assert metrics.requests.labels("POST", rule, "404")._value.get() == before + 1


def test_a_chunked_body_is_read_as_werkzeug_reads_it(gateway, api, lean):
    """gunicorn hands a chunked body over without Content-Length, the stream
    marked terminated; both paths read it to its end. Beyond 1 MiB the lean
    path answers the contract's 413; Flask's cuts the stream at 1 MiB and so
    finds the JSON cut short (400): a refusal either way."""
    import io

    def call(body: bytes):
        env = {"REQUEST_METHOD": "POST", "PATH_INFO": POLL, "SCRIPT_NAME": "", "QUERY_STRING": "",
               "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
               "HTTP_HOST": "127.0.0.1:8000", "HTTP_AUTHORIZATION": RUNTIME["Authorization"],
               "HTTP_TRANSFER_ENCODING": "chunked", "CONTENT_TYPE": "application/json",
               "wsgi.input": io.BytesIO(body), "wsgi.input_terminated": True, "wsgi.url_scheme": "http",
               "wsgi.errors": io.StringIO(), "wsgi.multithread": True, "wsgi.multiprocess": False,
               "wsgi.run_once": False, "wsgi.version": (1, 0), "REMOTE_ADDR": "127.0.0.1"}
        status = []
        raw = b"".join(gateway.wsgi_app(env, lambda s, h, *a: status.append(s)))
        return status[0].split()[0], json.loads(raw)

    api.create()
    body = json.dumps({"runtimeInstanceId": "r", "capabilities": ["learning_state_analysis"]}).encode()
    answers = []
    for enabled in (True, False):
        lean.enabled = enabled
        status, page = call(body)
        answers.append((status, len(page["jobs"])))
        too_big = call(b'{"runtimeInstanceId": "' + b"x" * (1024 * 1024 + 10) + b'"}')
        answers.append((too_big[0], too_big[1]["error"]["code"]))
    lean.enabled = True
    assert answers[:2] == [("200", 1), ("413", "PAYLOAD_TOO_LARGE")]
    assert answers[2] == answers[0] and answers[3][0].startswith("4")
