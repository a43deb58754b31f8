"""People at the edge (issue 39): sign-in sessions, the throttle, CSRF, the
audit, and an ended session's websocket; each a hostile case from the issue."""

from __future__ import annotations

import logging
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
import websocket
from sqlalchemy import text

from gateway.app import create_app
from services.identity.passwords import Passwords
from services.identity.users import Actor, UserStore
from shared.config import load_settings
from shared.db.engine import make_engine
from tests.gateway.conftest import ADMIN
from tests.gateway.test_token_rotation import close_code
from tests.identity.conftest import FAST_ARGON2
from tests.identity.slapd import PEOPLE as LDAP_PEOPLE
from tests.identity.slapd import slapd  # noqa: F401 - the fixture

PASSWORD = "correct horse battery"
ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN}"}
CONSOLE = Actor("test", "admin", "console")


@pytest.fixture
def people(db_url):
    """A user store on the test database (as ``linectl users`` writes it) with alice and bob."""
    engine = make_engine(db_url, pool_size=2)
    store = UserStore(engine, Passwords(1, 1024))
    for name in ("alice", "bob"):
        store.add(name, "operator", PASSWORD, CONSOLE, display_name=name.title())
    yield store
    engine.dispose()


def _app(gateway_env, **env):
    return create_app(load_settings({**gateway_env, **FAST_ARGON2, **env}))


@pytest.fixture
def people_app(gateway_env, people):
    app = _app(gateway_env)
    yield app
    app.extensions["linectl"].close()


@pytest.fixture
def client(people_app):
    return people_app.test_client()


def sign_in(client, name="alice", password=PASSWORD):
    return client.post("/api/session", json={"username": name, "password": password})


def test_sign_in_get_and_sign_out_then_the_replayed_cookie_is_refused(client):
    signed = sign_in(client)
    assert signed.status_code == 200
    body = signed.get_json()
    # Every line: the plant's (here the one of deploy/line.yaml), and said so.
    assert body["user"] == {"name": "alice", "displayName": "Alice", "role": "operator", "lines": ["demo-cell"],
                            "allLines": True}
    assert body["csrfToken"] and body["expiresAt"].endswith("Z")
    cookie = signed.headers["Set-Cookie"]
    assert cookie.startswith("linectl_session=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Path=/" in cookie and "Secure" not in cookie  # no TLS here
    value = client.get_cookie("linectl_session").value
    again = client.get("/api/session").get_json()
    assert again["user"] == body["user"] and again["csrfToken"] == body["csrfToken"]
    assert again["expiresAt"] >= body["expiresAt"]  # the idle limit slides with each request
    assert client.get("/api/me").get_json() == {"role": "operator", "name": "alice"}

    assert client.delete("/api/session").status_code == 403  # no X-CSRF-Token
    assert client.delete("/api/session", headers={"X-CSRF-Token": body["csrfToken"]}).status_code == 204
    client.set_cookie("linectl_session", value)  # replayed
    assert client.get("/api/session").status_code == 401
    assert client.get("/api/me").get_json()["error"]["code"] == "UNAUTHORIZED"


def test_a_session_fixed_before_sign_in_is_not_kept(client):
    client.set_cookie("linectl_session", "chosen-by-the-attacker-0123456789")
    first = sign_in(client)
    kept = client.get_cookie("linectl_session").value
    assert first.status_code == 200 and kept != "chosen-by-the-attacker-0123456789"
    sign_in(client)
    assert client.get_cookie("linectl_session").value != kept  # a new id at each sign-in
    client.set_cookie("linectl_session", "chosen-by-the-attacker-0123456789")
    assert client.get("/api/session").status_code == 401


def test_a_user_limited_to_other_lines_gets_403_on_this_lines_paths_and_stream(client, people):
    people.add("dan", "operator", PASSWORD, CONSOLE, lines=["cell-b"])
    people.add("eve", "operator", PASSWORD, CONSOLE, lines=["demo-cell"])  # deploy/line.yaml's line id
    upgrade = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    dan = sign_in(client, "dan").get_json()["user"]
    assert (dan["lines"], dan["allLines"]) == ([], False)  # none of this plant's lines: not every line
    assert client.get("/api/work-orders").get_json()["error"]["code"] == "FORBIDDEN"
    assert client.get("/ws", headers=upgrade).status_code == 403
    assert client.get("/api/me").status_code == 200  # who they are, still
    eve = sign_in(client, "eve").get_json()["user"]
    assert (eve["lines"], eve["allLines"]) == (["demo-cell"], False)
    assert client.get("/api/session").get_json()["user"] == eve
    assert client.get("/api/work-orders").status_code == 200


def test_another_site_cannot_sign_this_browser_in(client):
    refused = client.post("/api/session", json={"username": "alice", "password": PASSWORD},
                          headers={"Origin": "https://elsewhere.example"})
    assert refused.status_code == 403 and "Set-Cookie" not in refused.headers
    assert client.post("/api/session", json={"username": "alice", "password": PASSWORD},
                       headers={"Origin": "http://localhost"}).status_code == 200  # the test client's own host


def test_wrong_password_unknown_and_disabled_users_answer_alike(client, people):
    people.set_disabled("bob", True, CONSOLE)
    answers = [sign_in(client, "alice", "wrong password!"), sign_in(client, "nobody-here"),
               sign_in(client, "bob")]
    assert {a.status_code for a in answers} == {401}
    assert len({a.get_data() for a in answers}) == 1
    assert answers[0].get_json()["error"]["code"] == "INVALID_CREDENTIALS"
    assert "Set-Cookie" not in answers[2].headers


def test_unknown_user_costs_the_same_time_as_a_wrong_password(gateway_env, db_url):
    """Median of 50 each, interleaved; with hash work that dominates the request.
    The work is this process's CPU time (the request and its hash run here): the
    wall time of a loaded machine (the suite's other shards) differed by 27 % once
    between two medians of the same work."""
    engine = make_engine(db_url, pool_size=1)
    UserStore(engine, Passwords(2, 8192)).add("carol", "operator", PASSWORD, CONSOLE)
    app = _app(gateway_env, LINECTL_ARGON2_TIME_COST="2", LINECTL_ARGON2_MEMORY_KIB="8192")
    client = app.test_client()
    times = {"known": [], "unknown": []}
    try:
        for i in range(50):  # distinct names: the throttle never answers instead
            for kind, name in (("known", "carol"), ("unknown", f"nobody-{i}")):
                t0 = time.process_time()
                assert sign_in(client, name, f"wrong password {i}").status_code in (401, 429)
                times[kind].append(time.process_time() - t0)
            with engine.begin() as conn:
                conn.execute(text("DELETE FROM people_sign_in_failure"))
    finally:
        app.extensions["linectl"].close()
        engine.dispose()
    known, unknown = statistics.median(times["known"]), statistics.median(times["unknown"])
    assert abs(known - unknown) <= 0.2 * max(known, unknown), (known, unknown)


def test_brute_force_is_throttled_across_workers_and_for_one_name_only(gateway_env, people, client):
    other_worker = _app(gateway_env).test_client()  # its own engine and context: counts come from the DB
    try:
        for i in range(5):
            worker = client if i % 2 else other_worker
            assert sign_in(worker, "alice", f"guess {i} nope").status_code == 401
        for worker in (client, other_worker):
            refused = sign_in(worker, "alice", PASSWORD)  # the right password, still refused
            assert refused.status_code == 429
            assert refused.get_json()["error"]["code"] == "TOO_MANY_ATTEMPTS"
            assert 1 <= int(refused.headers["Retry-After"]) <= 15 * 60
        assert sign_in(other_worker, "bob").status_code == 200  # another user is unaffected
    finally:
        other_worker.application.extensions["linectl"].close()


def test_a_cross_site_post_with_the_cookie_and_no_csrf_token_changes_nothing(client, writable, standin):
    csrf = sign_in(client).get_json()["csrfToken"]
    order = {"productId": "BRACKET-A", "quantity": 2}
    refused = client.post("/api/work-orders", json=order)
    assert refused.status_code == 403 and refused.get_json()["error"]["code"] == "CSRF_TOKEN_INVALID"
    assert client.post("/api/work-orders", json=order, headers={"X-CSRF-Token": "x" * 43}).status_code == 403
    with writable() as s:
        assert s.execute(text("SELECT count(*) FROM work_order")).scalar() == 0
    made = client.post("/api/work-orders", json=order, headers={"X-CSRF-Token": csrf})
    assert made.status_code == 201


def test_the_audit_names_the_person_their_role_and_source(client, writable, standin):
    sign_in(client, "alice", "not the password")
    csrf = sign_in(client).get_json()["csrfToken"]
    order = client.post("/api/work-orders", json={"productId": "BRACKET-A", "quantity": 1},
                        headers={"X-CSRF-Token": csrf}).get_json()
    client.delete("/api/session", headers={"X-CSRF-Token": csrf})
    page = client.get("/api/audit?limit=3", headers=ADMIN_AUTH).get_json()
    items = page["items"]
    assert [(i["action"], i["actor"], i["outcome"]) for i in items] == [
        ("SignOut", "alice", "DONE"), ("CreateOrder", "alice", "HANDLED"), ("SignIn", "alice", "DONE")]
    assert items[1]["role"] == "operator" and items[1]["source"] == "127.0.0.1" and items[1]["lineId"] == "demo-cell"
    assert items[1]["targetType"] == "work_order" and items[1]["targetId"] == str(order["id"])
    rest = client.get(f"/api/audit?cursor={page['nextCursor']}", headers=ADMIN_AUTH).get_json()["items"]
    assert [(i["action"], i["outcome"]) for i in rest][:1] == [("SignIn", "INVALID_CREDENTIALS")]
    assert client.get("/api/audit?action=CreateOrder&actor=alice", headers=ADMIN_AUTH).get_json()["items"] \
        == [items[1]]
    assert client.get("/api/audit", headers={"X-CSRF-Token": csrf}).status_code == 401
    assert client.get("/api/audit?cursor=abc", headers=ADMIN_AUTH).status_code == 400


def test_a_disabled_users_websocket_closes_4401_within_a_second(gateway_server, people, db_url):
    served = gateway_server(**FAST_ARGON2)
    signed = requests.post(served.base + "/api/session", json={"username": "alice", "password": PASSWORD},
                           timeout=10)
    cookie = f"linectl_session={signed.cookies['linectl_session']}"
    ws = websocket.create_connection(served.base.replace("http", "ws") + "/ws", header=[f"Cookie: {cookie}"],
                                     timeout=10)
    try:
        people.set_disabled("alice", True, CONSOLE)  # what `linectl users disable alice` does
        t0 = time.monotonic()
        assert close_code(ws) == (4401, "token revoked")
        assert time.monotonic() - t0 < 1.0
    finally:
        ws.close()
    assert requests.get(served.base + "/api/session", headers={"Cookie": cookie}, timeout=10).status_code == 401
    assert PASSWORD not in served.log_path.read_text()


def test_an_ldap_user_signs_in_through_the_gateway_with_their_groups_role(gateway_env, slapd, people):  # noqa: F811
    app = _app(gateway_env, **slapd.settings(starttls=True))
    try:
        client = app.test_client()
        signed = sign_in(client, "ann", LDAP_PEOPLE["ann"])
        assert signed.status_code == 200
        assert signed.get_json()["user"] == {"name": "ann", "displayName": "Ann Example", "role": "operator",
                                             "lines": ["demo-cell"], "allLines": True}
        assert client.get("/api/me").get_json() == {"role": "operator", "name": "ann"}
        outside = sign_in(client, "ben", LDAP_PEOPLE["ben"])
        assert outside.status_code == 401 and outside.get_data() == sign_in(client, "nobody").get_data()
        assert sign_in(client, "alice").status_code == 200  # local users first, LDAP or not
    finally:
        app.extensions["linectl"].close()


def test_no_password_or_hash_reaches_a_log_line(client, people, caplog):
    caplog.set_level(logging.DEBUG)
    sign_in(client, "alice", "a wrong password here")
    sign_in(client, "alice")
    client.post("/api/session", json={"username": "alice", "password": 12345})  # refused: named, not echoed
    people.set_password("alice", "a brand new password", CONSOLE)
    people.add("frank", "operator", "franks secret password", CONSOLE)
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    for secret in (PASSWORD, "a wrong password here", "a brand new password", "franks secret password", "$argon2"):
        assert secret not in logged


def test_attempts_made_at_once_on_two_workers_cannot_slip_under_the_limit(gateway_server):
    """Ten wrong passwords at once, over two workers, with hash work that takes a while:
    five are checked, the other five refused."""
    served = gateway_server(workers=2, LINECTL_ARGON2_TIME_COST="2", LINECTL_ARGON2_MEMORY_KIB="16384")
    body = {"username": "nobody-here", "password": "wrong but long enough"}  # the dummy hash: slow
    with ThreadPoolExecutor(10) as pool:
        codes = list(pool.map(lambda _: requests.post(served.base + "/api/session", json=body, timeout=30).status_code,
                              range(10)))
    assert sorted(codes) == [401] * 5 + [429] * 5
