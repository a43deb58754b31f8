"""The gateway's commands against the REAL line_controller (not a stand-in):
HTTP → RPC pool → event loop → PostgreSQL → reply, and the REST reads see what
the loop wrote. The scheduler and hardware are not involved: no hardware
service runs, so the loop's hardware requests fail fast and are recorded."""

import pytest
from sqlalchemy import text

from gateway.app import create_app
from gateway.rpc import RpcPool
from services.line_controller.service import LineControllerService
from shared.config import load_settings

TOKEN = "op-token-e2e-000001"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(container_factory, nameko_config, db_url):
    container = container_factory(LineControllerService, nameko_config)
    container.start()
    settings = load_settings({"LINECTL_DATABASE_URL": db_url, "LINECTL_TOKENS": f"operator:{TOKEN}",
                              "LINECTL_COMMAND_WAIT_SECONDS": "10"})
    pool = RpcPool(nameko_config, size=4, timeout=30)
    app = create_app(settings, rpc_pool=pool)
    yield app.test_client()
    pool.close()


def test_order_lifecycle_over_http_on_the_real_loop(client, engine):
    r = client.post("/api/work-orders", json={"productId": "SHAFT-B", "quantity": 3, "priority": 2},
                    headers=AUTH)
    assert r.status_code == 201, r.get_json()
    order = r.get_json()
    assert order["status"] == "CREATED" and order["quantity"] == 3

    # Invalid transition is a 409 and changes nothing.
    r = client.post(f"/api/work-orders/{order['id']}/pause", headers=AUTH)
    assert r.status_code == 409 and r.get_json()["error"]["code"] == "INVALID_TRANSITION"

    r = client.post(f"/api/work-orders/{order['id']}/start", headers=AUTH)
    assert r.status_code == 200, r.get_json()
    assert r.get_json()["status"] == "RUNNING"
    jobs = client.get(f"/api/jobs?workOrderId={order['id']}", headers=AUTH).get_json()["items"]
    assert len(jobs) == 3

    r = client.post(f"/api/work-orders/{order['id']}/cancel", json={"note": "test"}, headers=AUTH)
    assert r.status_code == 200 and r.get_json()["status"] == "CANCELLED"
    assert client.get(f"/api/work-orders/{order['id']}", headers=AUTH).get_json()["status"] == "CANCELLED"

    # Every change went through the loop: a gapless event log and an audit trail.
    with engine.connect() as conn:
        seqs = [row[0] for row in conn.execute(text("SELECT seq FROM event_log ORDER BY seq"))]
        assert seqs == list(range(1, len(seqs) + 1)) and seqs
        actions = {row[0] for row in conn.execute(text("SELECT action FROM audit_log"))}
    assert {"CreateOrder", "StartOrder", "CancelOrder"} <= actions


def test_unknown_order_is_404_and_bad_input_400(client):
    r = client.post("/api/work-orders/999999/start", headers=AUTH)
    assert r.status_code == 404 and r.get_json()["error"]["code"] == "NOT_FOUND"
    r = client.post("/api/work-orders", json={"productId": "NOPE", "quantity": 1}, headers=AUTH)
    assert r.status_code == 400 and r.get_json()["error"]["code"] == "VALIDATION_ERROR"
    r = client.post("/api/work-orders", json={"productId": "SHAFT-B", "quantity": 0}, headers=AUTH)
    assert r.status_code == 400


def test_audit_names_the_token_holder_not_x_actor(container_factory, nameko_config, db_url, engine):
    container_factory(LineControllerService, nameko_config).start()
    settings = load_settings({"LINECTL_DATABASE_URL": db_url, "LINECTL_COMMAND_WAIT_SECONDS": "10",
                              "LINECTL_TOKENS": f"operator:shift-lead-ann:{TOKEN}"})
    pool = RpcPool(nameko_config, size=2, timeout=30)
    try:
        client = create_app(settings, rpc_pool=pool).test_client()
        r = client.post("/api/work-orders", json={"productId": "SHAFT-B", "quantity": 1},
                        headers={**AUTH, "X-Actor": "admin|root"})
        assert r.status_code == 201, r.get_json()
    finally:
        pool.close()
    with engine.connect() as conn:
        actor, detail = conn.execute(text("SELECT actor, detail FROM audit_log WHERE action = 'CreateOrder'")).one()
    assert actor == "shift-lead-ann"
    assert detail["actorNote"] == "adminroot"  # a note only, its separator stripped


def test_an_idempotency_key_makes_order_creation_safe_to_retry(client, engine):
    body = {"productId": "SHAFT-B", "quantity": 2, "priority": 3}
    key = {**AUTH, "Idempotency-Key": "client-retry-7f3a"}
    first = client.post("/api/work-orders", json=body, headers=key)
    assert first.status_code == 201, first.get_json()
    again = client.post("/api/work-orders", json=body, headers=key)
    assert again.status_code == 200, again.get_json()
    assert again.get_json()["id"] == first.get_json()["id"]
    other = client.post("/api/work-orders", json={**body, "quantity": 3}, headers=key)
    assert other.status_code == 409
    assert other.get_json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    # Without a key (or with another one) each POST is a new order.
    assert client.post("/api/work-orders", json=body, headers=AUTH).status_code == 201
    assert client.post("/api/work-orders", json=body,
                       headers={**AUTH, "Idempotency-Key": "another-key"}).status_code == 201
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM work_order")).scalar() == 3


@pytest.mark.parametrize("bad", ["", "   ", "x" * 201, "tab\there"])
def test_a_malformed_idempotency_key_is_400_and_creates_nothing(client, engine, bad):
    r = client.post("/api/work-orders", json={"productId": "SHAFT-B", "quantity": 1},
                    headers={**AUTH, "Idempotency-Key": bad})
    assert r.status_code == 400 and "Idempotency-Key" in r.get_json()["error"]["message"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM work_order")).scalar() == 0


def test_a_loop_whose_database_fails_mid_command_is_503_not_409(client, engine, monkeypatch):
    """The loop answers FAILED/INTERNAL when its own transaction fails: that is
    the server's fault (503 UNAVAILABLE), never the client's (409)."""
    from services.line_controller import loop as loop_module
    from services.line_controller.messages import CreateOrder

    def broken_handler(parsed, ctx):
        raise RuntimeError("connection to the database lost")

    monkeypatch.setitem(loop_module.HANDLERS, CreateOrder, broken_handler)
    r = client.post("/api/work-orders", json={"productId": "SHAFT-B", "quantity": 1}, headers=AUTH)
    assert r.status_code == 503, r.get_json()
    assert r.get_json()["error"]["code"] == "UNAVAILABLE"


def test_a_service_that_raises_is_503_not_500(container_factory, nameko_config, db_url, monkeypatch):
    """A RemoteError (the service raised, e.g. its database is down while it
    persists the command) maps to 503 UNAVAILABLE."""
    from services.line_controller.loop import EventLoop

    def database_down(self, msg):
        raise ConnectionError("could not connect to server")

    monkeypatch.setattr(EventLoop, "persist", database_down)
    container_factory(LineControllerService, nameko_config).start()
    settings = load_settings({"LINECTL_DATABASE_URL": db_url, "LINECTL_TOKENS": f"operator:{TOKEN}",
                              "LINECTL_COMMAND_WAIT_SECONDS": "10"})
    pool = RpcPool(nameko_config, size=2, timeout=30)
    try:
        client = create_app(settings, rpc_pool=pool).test_client()
        r = client.post("/api/work-orders", json={"productId": "SHAFT-B", "quantity": 1}, headers=AUTH)
    finally:
        pool.close()
    assert r.status_code == 503, r.get_json()
    assert r.get_json()["error"]["code"] == "UNAVAILABLE"


def test_a_retry_after_a_lost_transport_answer_is_still_201(container_factory, nameko_config, db_url, engine):
    """The gateway resends a command (same id) when its client's connection broke
    mid-call; if the first send had landed, the replay is this request's own
    outcome: 201, one order (not the 200 of a repeated Idempotency-Key)."""
    from contextlib import contextmanager

    from gateway.rpc import TransportLost

    container_factory(LineControllerService, nameko_config).start()
    settings = load_settings({"LINECTL_DATABASE_URL": db_url, "LINECTL_TOKENS": f"operator:{TOKEN}",
                              "LINECTL_COMMAND_WAIT_SECONDS": "10"})
    pool = RpcPool(nameko_config, size=2, timeout=30)
    real_client, calls = pool.client, []

    class AnswerLost:
        def __init__(self, rpc):
            self.line_controller = self
            self._rpc = rpc

        def command(self, *args, **kwargs):
            self._rpc.line_controller.command(*args, **kwargs)  # it lands...
            raise TransportLost(OSError("connection reset"))   # ...and the answer is lost

    @contextmanager
    def flaky_client():
        calls.append(1)
        with real_client() as rpc:
            yield AnswerLost(rpc) if len(calls) == 1 else rpc

    pool.client = flaky_client
    try:
        client = create_app(settings, rpc_pool=pool).test_client()
        r = client.post("/api/work-orders", json={"productId": "SHAFT-B", "quantity": 1}, headers=AUTH)
    finally:
        pool.close()
    assert (r.status_code, len(calls)) == (201, 2), r.get_json()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM work_order")).scalar() == 1
