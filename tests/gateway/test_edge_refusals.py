"""What gunicorn refuses before the app sees it (a request line or headers
beyond its bounds, a request it cannot parse) is answered in the JSON error
envelope with the status gunicorn would give, against a real served gateway;
the gateway serves on."""

from __future__ import annotations

import json
import socket
import time

import pytest
import requests

from tests.gateway.conftest import OPERATOR

pytestmark = pytest.mark.timeout(60)


def raw(base: str, request: bytes) -> tuple[int, dict, dict]:
    """(status, headers, JSON body) of the first response to a request written as bytes."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, json.loads(body[:int(headers["content-length"])])


def assert_envelope(status, headers, body, expected_status, code):
    assert status == expected_status, body
    assert headers["content-type"] == "application/json"
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"]


def test_a_long_path_or_header_is_refused_in_the_envelope(served_gateway):
    for url in (served_gateway + "/api/work-orders/" + "a" * 10_000,
                served_gateway + "/api/events?after=" + "1" * 10_000):
        r = requests.get(url, timeout=10)
        assert_envelope(r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.json(), 414, "URI_TOO_LONG")
        assert r.json()["error"]["message"].startswith("request line:")
    r = requests.get(served_gateway + "/healthz", headers={"X-Long": "a" * 10_000}, timeout=10)
    assert_envelope(r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.json(), 431, "HEADERS_TOO_LARGE")
    many = {f"X-H{i}": "1" for i in range(150)}
    r = requests.get(served_gateway + "/healthz", headers=many, timeout=10)
    assert_envelope(r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.json(), 431, "HEADERS_TOO_LARGE")
    assert requests.get(served_gateway + "/healthz", timeout=10).json() == {"status": "ok"}


AUTHORIZED_POST = (b"POST /api/work-orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Authorization: Bearer " + OPERATOR.encode() + b"\r\n")
# (what is wrong, the request as bytes, status, code)
UNPARSEABLE = [
    ("request line", b"NOT A REQUEST\r\n\r\n", 400, "VALIDATION_ERROR"),
    ("version", b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 400, "VALIDATION_ERROR"),
    ("header name", b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", 400, "VALIDATION_ERROR"),
    ("obsolete folding", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\n\r\n", 400,
     "VALIDATION_ERROR"),
    ("transfer coding", b"POST /api/work-orders HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: bogus\r\n\r\n", 501,
     "NOT_IMPLEMENTED"),
    # A view reading the body meets the malformed chunk: gunicorn's parser raises inside the app.
    ("chunk size", AUTHORIZED_POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "VALIDATION_ERROR"),
    ("chunk terminator", AUTHORIZED_POST + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabcde\r\n0\r\n\r\n", 400,
     "VALIDATION_ERROR"),
]


def test_a_request_gunicorn_cannot_parse_is_refused_in_the_envelope(served_gateway):
    for what, request_bytes, status, code in UNPARSEABLE:
        try:
            assert_envelope(*raw(served_gateway, request_bytes), status, code)
        except AssertionError as exc:
            raise AssertionError(f"{what}: {exc}") from None
    assert requests.get(served_gateway + "/healthz", timeout=10).json() == {"status": "ok"}


def test_idle_connections_do_not_hold_the_request_threads(gateway_server):
    """Three times as many connections as request threads, none sending a
    byte: a request on a fresh connection is still answered at once, and an
    idle connection that then sends its request is served too. (gunicorn
    held a thread 5 s for each idle connection: this request waited 15 s.)"""
    served = gateway_server(threads=4)
    idle = [socket.create_connection(("127.0.0.1", served.port), timeout=10) for _ in range(12)]
    try:
        started = time.monotonic()
        assert requests.get(served.base + "/healthz", timeout=30).status_code == 200
        assert time.monotonic() - started < 2.5
        late = idle[0]
        late.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := late.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
    finally:
        for s in idle:
            s.close()
