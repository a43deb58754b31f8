"""A set-up or teardown that stalls is reported with where it waits."""

import weakref

import eventlet

from tests.support import stall_report
from tests.support.waiting import wait_for


def test_a_stalled_phase_reports_each_green_threads_stack(tmp_path, monkeypatch):
    log = tmp_path / "stalls.log"
    monkeypatch.setenv("LINECTL_TEST_STALL_LOG", str(log))
    monkeypatch.setattr(stall_report, "STALL_SECONDS", 0.2)
    monkeypatch.setattr(stall_report, "database_server", {})
    released = eventlet.Event()
    dead_proxy = weakref.proxy(type("Gone", (), {})())  # asking it anything raises ReferenceError

    def waits_for_release():
        released.wait()

    waiter = eventlet.spawn(waits_for_release)
    with stall_report._Watchdog("tests/x.py::test_y", "teardown") as watchdog:
        # its thread ends once the report is written (the file exists, empty, before that)
        wait_for(lambda: not watchdog.thread.is_alive(), timeout=10)
    released.send()
    waiter.wait()
    report = log.read_text()
    assert dead_proxy is not None
    assert "STALL: tests/x.py::test_y (teardown)" in report
    assert "in waits_for_release" in report and "released.wait()" in report


def test_a_phase_that_ends_in_time_reports_nothing(tmp_path, monkeypatch):
    log = tmp_path / "stalls.log"
    monkeypatch.setenv("LINECTL_TEST_STALL_LOG", str(log))
    watchdog = stall_report._Watchdog("tests/x.py::test_y", "setup")
    with watchdog:
        pass
    watchdog.thread.join(5)
    assert not watchdog.thread.is_alive() and not log.exists()
