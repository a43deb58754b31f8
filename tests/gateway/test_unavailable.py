"""When the line_controller is not running: commands and /readyz answer 503
quickly with a clear message; reads still work."""

from __future__ import annotations

import pytest

from gateway.app import create_app
from shared.config import load_settings
from tests.gateway.conftest import AUTH, gateway_app


@pytest.fixture
def lonely_client(gateway_env, writable):
    with gateway_app({**gateway_env, "LINECTL_COMMAND_WAIT_SECONDS": "1"}) as app:
        yield app.test_client()


def test_commands_and_readyz_answer_503_without_line_controller(lonely_client):
    r = lonely_client.post("/api/work-orders", json={"productId": "BRACKET-A", "quantity": 1},
                           headers=AUTH)
    assert r.status_code == 503
    body = r.get_json()["error"]
    assert body["code"] == "UNAVAILABLE" and body["message"]
    r = lonely_client.get("/readyz")
    message = r.get_json()["error"]["message"]
    assert r.status_code == 503 and "line_controller" in message and "hardware" in message
    assert lonely_client.get("/api/work-orders", headers=AUTH).status_code == 200
    assert "linectl_line_controller_up 0.0" in lonely_client.get("/metrics").get_data(as_text=True)


def test_readyz_names_the_database_when_it_is_down(gateway_env):
    app = create_app(load_settings({**gateway_env,
                                    "LINECTL_DATABASE_URL": "postgresql://u@127.0.0.1:1/none"}))
    try:
        r = app.test_client().get("/readyz")
        assert r.status_code == 503 and "database" in r.get_json()["error"]["message"]
        r = app.test_client().get("/api/work-orders", headers=AUTH)
        assert r.status_code == 503 and r.get_json()["error"]["code"] == "UNAVAILABLE"
    finally:
        app.extensions["linectl"].close()
