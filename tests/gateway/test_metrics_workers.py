"""/metrics of a served gateway with several workers: one scrape, whichever
worker answers it, counts the requests every worker served, and a worker
killed and restarted by gunicorn loses none of its counts."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path

import pytest
import requests
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import AUTH
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

WORKERS = 3
LINE = {"method": "GET", "endpoint": "/api/line", "status": "200"}


def metrics_dir(served) -> Path:
    return Path(served.log_path.parent) / "gateway-metrics" / str(served.port)


def scraped_count(base: str) -> float:
    """``GET /api/line`` requests counted by one scrape."""
    text = requests.get(base + "/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "linectl_http_requests_total" and sample.labels == LINE:
                return sample.value
    return 0.0


def counted_by_worker(directory: Path) -> dict[int, float]:
    """``GET /api/line`` requests per worker pid, each read from that worker's file alone."""
    counts = {}
    for file in directory.glob("counter_*.db"):
        with tempfile.TemporaryDirectory() as alone:
            shutil.copy(file, alone)
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=alone)
            value = registry.get_sample_value("linectl_http_requests_total", LINE)
        if value:
            counts[int(file.stem.split("_")[1])] = value
    return counts


class Load:
    """Bursts of concurrent requests, each on a connection of its own, so that
    the workers' accepts share them out."""

    def __init__(self, base: str):
        self.base = base
        self.sent = 0

    def burst(self, n: int = 12) -> None:
        codes = []

        def one():
            codes.append(requests.get(self.base + "/api/line", headers=AUTH, timeout=10).status_code)

        threads = [threading.Thread(target=one) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert codes == [200] * n
        self.sent += n

    def until_served_by_several_workers(self, directory: Path) -> dict[int, float]:
        def spread():
            self.burst()
            counts = counted_by_worker(directory)
            return counts if len(counts) > 1 else None

        return wait_for(spread, 20, message="requests served by more than one worker")


def test_one_scrape_counts_the_requests_of_every_worker(gateway_server):
    served = gateway_server(threads=8, workers=WORKERS)
    directory = metrics_dir(served)
    load = Load(served.base)
    counts = load.until_served_by_several_workers(directory)
    assert set(counts) <= set(served.worker_pids())
    assert sum(counts.values()) == load.sent
    for _ in range(WORKERS * 2):  # whichever worker takes the scrape
        assert scraped_count(served.base) == load.sent


def test_a_killed_and_restarted_worker_keeps_its_counts(gateway_server):
    served = gateway_server(threads=8, workers=WORKERS)
    directory = metrics_dir(served)
    load = Load(served.base)
    counts = load.until_served_by_several_workers(directory)
    victim = max(counts, key=counts.get)
    assert (directory / f"gauge_livesum_{victim}.db").exists()  # its open-websocket gauge

    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: victim not in (pids := served.worker_pids()) and len(pids) == WORKERS, 20,
             message="gunicorn to replace the killed worker")
    assert scraped_count(served.base) == load.sent
    # Its counts stay; its live gauge does not (a dead worker has no open websockets).
    assert not (directory / f"gauge_livesum_{victim}.db").exists()
    load.burst()
    assert scraped_count(served.base) == load.sent
