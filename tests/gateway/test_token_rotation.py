"""Token rotation without a restart, against a real served gateway (two worker
processes): the tokens file is re-read on change and on SIGHUP by every worker,
a removed token is refused within seconds and its open websockets are closed
(4401), and a malformed file keeps the last good tokens."""

from __future__ import annotations

import json
import os
import signal
import struct
import time

import pytest
import requests
import websocket

from tests.gateway.test_ws import connect
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

OLD = "operator-old-token-0001"
NEW = "operator-new-token-0002"
KEPT = "operator-kept-token-003"
ADMIN = "admin-file-token-000004"


def write_tokens(path, *pairs: str) -> None:
    """As an operator should: a new file renamed into place (no half-written file is ever read)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text("# role:name:token, one a line\n" + "\n".join(pairs) + "\n")
    os.replace(tmp, path)


def status(base: str, token: str) -> int:
    # A new connection each time, so the requests spread over the worker processes.
    with requests.Session() as s:
        return s.get(base + "/api/equipment", headers={"Authorization": f"Bearer {token}",
                                                      "Connection": "close"}, timeout=10).status_code


def statuses(base: str, token: str, n: int = 12) -> set[int]:
    return {status(base, token) for _ in range(n)}


def rereads(served) -> int:
    """How many times a worker logged a re-read that changed its tokens (once per worker and change)."""
    return served.log_path.read_text().count("tokens: re-read")


def wait_for_every_worker(served, before: int, what: str) -> None:
    # Each worker notices on its own (within a second): the old token is checked
    # once all of them have, not when the first one answers 401.
    wait_for(lambda: rereads(served) >= before + len(served.worker_pids()), timeout=10,
             message=f"every worker to re-read the tokens ({what})")


def close_code(ws) -> tuple[int, str]:
    opcode, data = ws.recv_data(control_frame=True)
    while opcode != websocket.ABNF.OPCODE_CLOSE:  # frames already on their way
        opcode, data = ws.recv_data(control_frame=True)
    return struct.unpack("!H", data[:2])[0], data[2:].decode()


@pytest.fixture
def tokens_file(tmp_path):
    path = tmp_path / "tokens"
    write_tokens(path, f"operator:old:{OLD}", f"operator:kept:{KEPT}", f"admin:{ADMIN}")
    return path


@pytest.fixture
def served(gateway_server, tokens_file):
    return gateway_server(workers=2, LINECTL_TOKENS="", LINECTL_TOKENS_FILE=str(tokens_file))


def test_a_rotated_token_is_refused_and_the_new_one_accepted_without_a_restart(served, tokens_file):
    workers = served.worker_pids()
    assert statuses(served.base, OLD) == {200}
    assert status(served.base, NEW) == 401

    write_tokens(tokens_file, f"operator:new:{NEW}", f"operator:kept:{KEPT}", f"admin:{ADMIN}")
    wait_for_every_worker(served, 0, "the file changed")
    # A dozen fresh connections over the workers: none gets the old token in.
    assert statuses(served.base, OLD) == {401}
    assert statuses(served.base, NEW) == {200}
    assert statuses(served.base, KEPT) == {200}
    assert served.worker_pids() == workers  # nothing restarted


def test_an_open_websocket_of_a_removed_token_is_closed(served, tokens_file, events):
    revoked, kept = connect(served.base, token=OLD), connect(served.base, token=KEPT, query_token=True)
    try:
        write_tokens(tokens_file, f"operator:kept:{KEPT}", f"admin:{ADMIN}")
        revoked.settimeout(10)  # closed within seconds, by the worker holding it
        assert close_code(revoked) == (4401, "token revoked")
        frame = events.write([("AFTER_ROTATION", {})])[0]
        assert json.loads(kept.recv()) == frame  # another token's stream goes on
        # the other worker notices on its own; a new connection may reach either
        wait_for_every_worker(served, 0, "the file changed")
        refused = pytest.raises(websocket.WebSocketBadStatusException, connect, served.base, token=OLD)
        assert refused.value.status_code == 401
    finally:
        revoked.close()
        kept.close()


def test_sighup_rereads_the_tokens_at_once_in_every_worker(served, tokens_file, events):
    """The file is changed so that its inode, size and mtime stay the same: only
    the SIGHUP can make the workers notice."""
    workers = served.worker_pids()
    before = os.stat(tokens_file)
    text = tokens_file.read_text()
    same_size = NEW.replace("new", "hup")
    assert len(same_size) == len(OLD)
    with open(tokens_file, "r+") as fh:  # in place: the same inode
        fh.write(text.replace(OLD, same_size))
    os.utime(tokens_file, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(tokens_file)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)

    ws = connect(served.base, token=KEPT)
    try:
        os.kill(served.proc.pid, signal.SIGHUP)  # the master: it passes it on to every worker
        wait_for_every_worker(served, 0, "SIGHUP")
        assert statuses(served.base, same_size) == {200}
        assert statuses(served.base, OLD) == {401}
        assert served.worker_pids() == workers  # no gunicorn reload: the same workers
        frame = events.write([("AFTER_SIGHUP", {})])[0]
        assert json.loads(ws.recv()) == frame  # and their streams stayed open
    finally:
        ws.close()


def test_a_malformed_or_missing_file_keeps_the_last_good_tokens(served, tokens_file):
    short = "tooshort"
    write_tokens(tokens_file, f"operator:old:{OLD}", f"operator:{short}")
    wait_for(lambda: "keeping the last good tokens" in served.log_path.read_text(), timeout=10,
             message="the bad file logged")
    assert statuses(served.base, OLD) == {200}
    assert statuses(served.base, KEPT) == {200}  # not in the bad file, still accepted
    assert short not in served.log_path.read_text()  # a token is never logged, even a bad one

    tokens_file.unlink()
    wait_for(lambda: "cannot read" in served.log_path.read_text(), timeout=10, message="the missing file logged")
    assert statuses(served.base, OLD) == {200}

    assert rereads(served) == 0
    write_tokens(tokens_file, f"operator:new:{NEW}")  # fixed: read again
    wait_for_every_worker(served, 0, "the fixed file")
    assert statuses(served.base, NEW) == {200}
    assert statuses(served.base, OLD) == {401}


def test_a_worker_still_loading_its_app_survives_a_sighup(gateway_server, tokens_file):
    """A SIGHUP that reaches a worker before its app has loaded (an operator
    rotating tokens while a worker restarts) must not end it: gunicorn leaves
    SIGHUP at its default, exit, until the gateway's handler is in place."""
    served = gateway_server(workers=1, wait=False, LINECTL_TOKENS="", LINECTL_TOKENS_FILE=str(tokens_file))
    write_tokens(tokens_file, f"operator:new:{NEW}", f"admin:{ADMIN}")
    worker = wait_for(lambda: (pids := served.worker_pids()) and pids[0], timeout=30, interval=0.002,
                      message="the worker forked")
    hangups = 0
    while not served._loaded(worker):  # every few milliseconds while it loads
        try:
            os.kill(worker, signal.SIGHUP)
        except ProcessLookupError:
            pytest.fail(f"the worker died of a SIGHUP while it loaded (after {hangups})")
        hangups += 1
        time.sleep(0.005)  # the pace of the signals, not a wait for anything
    served.wait_ready()
    assert hangups > 0
    assert served.worker_pids() == [worker]  # the same worker, not a successor
    assert status(served.base, NEW) == 200
    assert status(served.base, OLD) == 401
