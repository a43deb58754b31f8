"""A test over its time limit fails alone, with a line saying so, and the tests
after it in the same process still run (tests/support/hung_tests.py)."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import eventlet
eventlet.monkey_patch()
from tests.support import hung_tests
hung_tests.TEARDOWN_GRACE = 1.0

def pytest_configure(config):
    config.pluginmanager.register(hung_tests, "linectl-hung-tests")
"""

MODULE = """
import time
import eventlet
import pytest
from eventlet import patcher
from eventlet.event import Event

pytestmark = pytest.mark.timeout(1)

def test_waits_on_a_green_event():
    Event().wait()

def test_waits_while_another_green_thread_computes():
    def computes():
        end = time.monotonic() + 3
        while time.monotonic() < end:
            pass
    eventlet.spawn(computes).wait()

def test_blocks_outside_the_hub():
    patcher.original("time").sleep(30)

@pytest.fixture
def hangs_in_teardown():
    yield
    Event().wait()

def test_hangs_and_so_does_its_teardown(hangs_in_teardown):
    time.sleep(30)

def test_after_them_the_hub_still_runs():
    assert eventlet.spawn(lambda: eventlet.sleep(0.01) or 5).wait() == 5
"""


def test_hung_tests_fail_one_by_one_and_the_rest_runs(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_hangs.py").write_text(textwrap.dedent(MODULE))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--disable-plugin-autoload",
         "-p", "pytest_timeout", "-q", "-rA", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60)
    out = done.stdout
    assert re.search(r"4 failed, 1 passed, (1 warning, )?1 error in", out), out[-3000:]
    assert "PASSED test_hangs.py::test_after_them_the_hub_still_runs" in out, out[-3000:]
    for name in ("test_waits_on_a_green_event", "test_waits_while_another_green_thread_computes",
                 "test_blocks_outside_the_hub", "test_hangs_and_so_does_its_teardown"):
        assert f"Timeout: test_hangs.py::{name} ran over its 1 s limit" in out, name
    assert "test_hangs_and_so_does_its_teardown still waited 1 s in its teardown" in out
    assert "Event().wait()" in out  # the traceback shows where the test waited
