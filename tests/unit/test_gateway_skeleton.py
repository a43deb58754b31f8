"""The gateway's conventions every blueprint relies on: the error envelope,
auth with roles, the body limit, and the OpenAPI document."""

from pathlib import Path

import pytest
from flask_smorest import Blueprint

from gateway.app import create_app
from gateway.auth import require
from shared.config import load_settings

TOKENS = "operator:operator-token-0123,admin:admin-token-000123,runtime:runtime-token-0123"


@pytest.fixture
def app():
    settings = load_settings({"LINECTL_DATABASE_URL": "postgresql://u@127.0.0.1:1/none",
                              "LINECTL_TOKENS": TOKENS})
    app = create_app(settings)
    blp = Blueprint("probe", __name__)

    @blp.route("/probe", methods=["POST"])
    @require("operator")
    def probe():
        return {"ok": True}

    app.extensions["linectl"]  # created by the factory
    from flask_smorest import Api  # noqa: F401

    app.register_blueprint(blp)
    return app


def test_healthz_and_openapi(app):
    c = app.test_client()
    assert c.get("/healthz").get_json() == {"status": "ok"}
    spec = c.get("/openapi.json").get_json()
    assert "/healthz" in spec["paths"]


def test_every_app_of_a_process_serves_the_same_whole_document(tmp_path):
    """The document is built by a process's first app only (GatewayApi): a later
    app, of other settings and another plant, serves it whole, its line paths too."""
    from gateway.app import GatewayApi

    GatewayApi._document = None  # this process's next app builds it afresh
    first = create_app(load_settings({"LINECTL_DATABASE_URL": "postgresql://u@127.0.0.1:1/none"}))
    plant = tmp_path / "plant.yaml"
    plant.write_text("plant: {id: p, name: P}\nlines:\n"
                     "  - {layout: %s}\n" % (Path(__file__).parents[2] / "deploy" / "line.yaml"))
    later = create_app(load_settings({"LINECTL_DATABASE_URL": "postgresql://v@127.0.0.1:2/other",
                                      "LINECTL_PLANT_FILE": str(plant)}))
    documents = [a.test_client().get("/openapi.json").get_json() for a in (first, later)]
    assert documents[0] == documents[1]
    assert "/api/lines/{lineId}/work-orders" in documents[1]["paths"]
    assert later.url_map.bind("x").match("/api/lines/cell-a/work-orders")[0] == "orders_of_line.list_orders"


def test_unknown_path_has_the_envelope(app):
    r = app.test_client().get("/nope")
    assert r.status_code == 404
    assert r.get_json()["error"]["code"] == "NOT_FOUND"


def test_401_without_token_403_with_wrong_role(app):
    c = app.test_client()
    r = c.post("/probe")
    assert r.status_code == 401 and r.get_json()["error"]["code"] == "UNAUTHORIZED"
    r = c.post("/probe", headers={"Authorization": "Bearer runtime-token-0123"})
    assert r.status_code == 403 and r.get_json()["error"]["code"] == "FORBIDDEN"
    r = c.post("/probe", headers={"Authorization": "Bearer wrong-token"})
    assert r.status_code == 401
    for token in ("operator-token-0123", "admin-token-000123"):
        r = c.post("/probe", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200


def test_body_over_one_mib_is_413(app):
    r = app.test_client().post(
        "/probe", data=b"x" * (1024 * 1024 + 1), content_type="application/json",
        headers={"Authorization": "Bearer operator-token-0123"},
    )
    assert r.status_code == 413
    assert r.get_json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
