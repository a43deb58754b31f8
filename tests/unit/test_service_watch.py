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

    def consumers(self, service):
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
