"""The served gateway (gunicorn gthread, not monkey-patched) under concurrent
commands: the RPC pool never mixes up replies between threads."""

from __future__ import annotations

import threading

import requests

from tests.gateway.conftest import AUTH


def test_concurrent_commands_each_get_their_own_reply(served_gateway):
    results, errors = {}, []

    def client(n):
        try:
            with requests.Session() as session:
                for i in range(5):
                    code = f"C-{n}-{i}"
                    r = session.post(served_gateway + "/api/work-orders", headers=AUTH, timeout=30,
                                     json={"productId": "SHAFT-B", "quantity": n + 1, "code": code})
                    results[code] = (r.status_code, r.json())
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(results) == 60
    for code, (status, body) in results.items():
        assert status == 201 and body["code"] == code
        assert body["quantity"] == int(code.split("-")[1]) + 1
    assert len({body["id"] for _, body in results.values()}) == 60
    r = requests.get(served_gateway + "/readyz", timeout=10)
    assert r.status_code == 200
