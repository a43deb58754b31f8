"""ServiceWatch shares one status() among concurrent callers and answers a
service that nothing consumes without asking it."""

from __future__ import annotations

import threading

import pytest

from gateway.errors import ApiError
from gateway.service_watch import ServiceWatch


class Watch(ServiceWatch):
    def __init__(self, consumers: int, status_of):
        super().__init__("memory://", status_of, status_ttl=60)
        self.live = consumers

    def consumers(self, service, *, recheck_absent=False):
        return self.live


def test_a_burst_of_callers_costs_one_status_call():
    calls = []
    release = threading.Event()

    def status_of(service):
        calls.append(service)
        release.wait(10)  # the RPC is in flight while the others arrive
        return {"ok": True}

    watch = Watch(1, status_of)
    results = []
    threads = [threading.Thread(target=lambda: results.append(watch.status("line_controller")))
               for _ in range(50)]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(10)
    assert calls == ["line_controller"]
    assert results == [({"ok": True}, None)] * 50


def test_a_service_nothing_consumes_is_not_asked():
    def status_of(service):
        raise AssertionError("must not be called")

    watch = Watch(0, status_of)
    assert watch.status("hardware") == (None, "hardware (not running)")
    with pytest.raises(ApiError) as refused:
        watch.require_running("line_controller")
    assert refused.value.status == 503 and refused.value.code == "UNAVAILABLE"


def test_a_failed_status_is_named_and_cached_too():
    calls = []

    def status_of(service):
        calls.append(service)
        raise TimeoutError("no answer")

    watch = Watch(1, status_of)
    assert watch.status("hardware") == (None, "hardware (not answering)")
    assert watch.status("hardware") == (None, "hardware (not answering)")
    assert calls == ["hardware"]


class TransportWatch(ServiceWatch):
    """The real presence cache over a transport whose answer the test sets."""

    def __init__(self):
        super().__init__("memory://", lambda service: {"ok": True}, presence_ttl=60)
        self.live = 0
        self.asked = 0

    def _ask_transport(self, queue):
        self.asked += 1
        return self.live


def test_a_service_back_a_moment_ago_is_not_refused_from_the_cache():
    # One gateway worker looked while the line_controller was away (its /readyz
    # or a command); the controller then came back.
    watch = TransportWatch()
    assert watch.status("line_controller") == (None, "line_controller (not running)")
    watch.live = 1
    watch.require_running("line_controller")  # asked again, not refused for the TTL
    assert watch.asked == 2
    # A positive answer is cached: a burst of commands costs one question.
    for _ in range(10):
        watch.require_running("line_controller")
    assert watch.asked == 2
    # Gone again: presence is still cached positive (within the TTL), the RPC's own timeout
    # stays the backstop; the next negative answer refuses at once.
    watch.live = 0
    watch._presence.clear()
    with pytest.raises(ApiError):
        watch.require_running("line_controller")
