"""The suite's served gateways are forked from a zygote that imported them
(tests/support/gateway_zygote.py): each is still ``python -m gateway``, with the
environment, arguments and log it was given, in a process group of its own."""

from __future__ import annotations

import os

from tests.support.gateway_zygote import GatewayZygote
from tests.support.waiting import wait_for


def test_a_forked_gateway_runs_main_with_its_own_environment_and_log(tmp_path):
    log = tmp_path / "gateway.log"
    env = {key: value for key, value in os.environ.items() if not key.startswith("LINECTL_")}
    proc = GatewayZygote.shared().spawn(["--name", "zygote-test"], {**env, "LINECTL_HTTP_PORT": "1"}, log)
    wait_for(lambda: proc.poll() is not None, timeout=30, message="the gateway without a database to stop")
    # main() ran with this environment (no database URL), not the zygote's, and said so in its log.
    assert log.read_text().strip() == "gateway: LINECTL_DATABASE_URL: the gateway needs the database URL"
