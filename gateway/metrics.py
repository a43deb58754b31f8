"""Prometheus metrics: the gateway's own (request counts and latency per
endpoint, connected websocket clients) and the line's, gathered at scrape
time: the line_controller's and the hardware service's ``status()`` RPCs
(loop queue length and lag, message handling time per type, hardware action
durations and failures per kind) and the AI job queue depth by state (one
query). One scrape target for the whole stack: the services need no HTTP
port of their own, and a service that does not answer shows as
``linectl_service_up{service=...} 0`` instead of a missing target.

Each app has its own registry (several apps in one test process must not clash).

**Across gateway workers** (``python -m gateway`` with several gunicorn
workers; a scrape reaches one of them): prometheus_client's multiprocess mode.
The master calls :func:`use_worker_files` before it forks, so every worker
keeps its own counters, histograms and gauges in files of its own under one
directory, and a scrape of any worker reads them all (``MultiProcessCollector``):
counters and histograms are summed over every worker that ever ran since the
start, a dead worker's counts included, so a restarted worker loses nothing;
the open-websocket gauge is summed over the live workers only
(``livesum``: :func:`worker_exited` drops a dead one's). The line's figures
are not per worker: the scraping worker gathers them itself (``LineCollector``)."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from flask import Flask, Response, g, request
from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess, values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own name for the directory


def use_worker_files(directory: Path) -> None:
    """Metrics made in this process and its children from now on keep their
    values in files under ``directory`` (gunicorn's master, before it forks).
    prometheus_client picks its value class when it is imported, from the
    environment; the directory is known only once the settings are read."""
    os.environ[MULTIPROCESS_ENV] = str(directory)
    values.ValueClass = values.MultiProcessValue()


def clean_worker_files(directory: Path) -> None:
    """An empty directory for a new start: the files of an earlier run would add
    its counts to this one's."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, mode=0o700)


def worker_exited(pid: int, directory: Path) -> None:
    """A worker's live gauges no longer count; its counters and histograms still do."""
    multiprocess.mark_process_dead(pid, str(directory))


def worker_files() -> Path | None:
    """The directory every worker's values are kept in, or None in a single process."""
    if getattr(values.ValueClass, "_multiprocess", False) and os.environ.get(MULTIPROCESS_ENV):
        return Path(os.environ[MULTIPROCESS_ENV])
    return None


@dataclass
class GatewayMetrics:
    registry: CollectorRegistry  # what a scrape renders
    requests: Counter
    latency: Histogram
    ws_clients: Gauge
    ws_fanout: Histogram
    ws_overflows: Counter
    line: LineCollector


@dataclass
class LineSnapshot:
    """What one scrape gathered; None where a part did not answer."""
    line_controller: dict | None = None
    hardware: dict | None = None
    ai_jobs: dict[str, int] | None = None
    ai_queue: dict | None = None  # services.ai_jobs.repository.queue_figures
    database: dict | None = None  # gateway.api.health.line_figures; None: unreachable


def _histogram(name, doc, label, snapshot) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=[label])
    bounds = snapshot.get("le", [])
    for key, s in sorted(snapshot.get("series", {}).items()):
        buckets = [(repr(float(b)), n) for b, n in zip(bounds, s["buckets"], strict=False)]
        family.add_metric([key], buckets + [("+Inf", s["count"])], s["sum"])
    return family


class LineCollector:
    """Turns the last :class:`LineSnapshot` into metric families."""

    def __init__(self):
        self.snapshot = LineSnapshot()

    def collect(self):
        snap = self.snapshot
        up = GaugeMetricFamily("linectl_service_up", "1 when the service answered status()",
                               labels=["service"])
        up.add_metric(["line_controller"], 1 if snap.line_controller else 0)
        up.add_metric(["hardware"], 1 if snap.hardware else 0)
        yield up
        lc = snap.line_controller or {}
        yield GaugeMetricFamily("linectl_line_controller_up", "1 when the line_controller answered status()",
                                value=1 if snap.line_controller else 0)
        if snap.line_controller:
            yield GaugeMetricFamily("linectl_loop_lag_seconds", "event-loop lag reported by the line_controller",
                                    value=float(lc.get("lagSeconds") or 0))
            yield GaugeMetricFamily("linectl_loop_queue_length", "messages waiting in the loop",
                                    value=float(lc.get("queueLength") or 0))
        if lc.get("handling"):
            yield from _timed_with_failures(
                ("linectl_loop_message_seconds", "time to handle one loop message"),
                ("linectl_loop_messages_failed", "loop messages that failed"), "type", lc["handling"])
        if "handledTotal" in lc:
            yield CounterMetricFamily("linectl_loop_messages_handled", "loop messages handled",
                                      value=lc["handledTotal"])
            yield GaugeMetricFamily("linectl_loop_recovering", "1 until the start-up recovery check ran",
                                    value=1 if lc.get("recovering") else 0)
        hw = snap.hardware or {}
        if hw:
            yield GaugeMetricFamily("linectl_plc_connected", "1 when the hardware service reaches the PLC",
                                    value=1 if hw.get("plcConnected") else 0)
        if hw.get("actions"):
            yield from _timed_with_failures(
                ("linectl_hardware_action_seconds", "hardware action duration"),
                ("linectl_hardware_action_failures", "hardware actions failed"), "action", hw["actions"])
        if snap.ai_jobs is not None:
            depth = GaugeMetricFamily("linectl_ai_jobs", "AI runtime jobs by state", labels=["state"])
            for state, n in sorted(snap.ai_jobs.items()):
                depth.add_metric([state], n)
            yield depth
        if snap.ai_queue is not None:
            yield GaugeMetricFamily("linectl_ai_oldest_pending_seconds",
                                    "age of the oldest pending AI job (0 when none waits)",
                                    value=snap.ai_queue["oldestPendingSeconds"])
            finished = GaugeMetricFamily("linectl_ai_jobs_finished_15m",
                                         "AI jobs that finished in the last 15 minutes, by state",
                                         labels=["state"])
            for state, n in sorted(snap.ai_queue["finishedLately"].items()):
                finished.add_metric([state], n)
            yield finished
        yield from _database_families(snap.database)


def _database_families(db: dict | None):
    """What the scrape read from the line's tables; only ``linectl_database_up 0``
    when the database did not answer."""
    yield GaugeMetricFamily("linectl_database_up", "1 when the database answered this scrape",
                            value=1 if db is not None else 0)
    if db is None:
        return
    if db["lastEventAgeSeconds"] is not None:
        yield GaugeMetricFamily("linectl_last_event_age_seconds", "seconds since the newest event_log row",
                                value=db["lastEventAgeSeconds"])
    yield GaugeMetricFamily("linectl_manual_actions_open", "manual actions waiting for an operator",
                            value=db["openManualActions"])
    yield GaugeMetricFamily("linectl_manual_action_oldest_open_seconds",
                            "age of the oldest open manual action (0 when none is open)",
                            value=db["oldestOpenManualActionSeconds"])
    orders = GaugeMetricFamily("linectl_work_orders", "work orders not finished, by status",
                               labels=["status"])
    for status, n in db["workOrders"].items():
        orders.add_metric([status], n)
    yield orders


def _timed_with_failures(histogram: tuple[str, str], failures: tuple[str, str], label: str, stats: dict):
    """A duration histogram per ``label`` value and its failure counter (``shared.stats.Durations``)."""
    yield _histogram(*histogram, label, stats)
    failed = CounterMetricFamily(*failures, labels=[label])
    for key, s in sorted(stats["series"].items()):
        failed.add_metric([key], s["failures"])
    yield failed


def create() -> GatewayMetrics:
    own = CollectorRegistry()  # this process's metric objects (several apps in one process must not clash)
    directory = worker_files()
    if directory is None:
        scrape = own
    else:  # every worker's values, from their files
        scrape = CollectorRegistry()
        multiprocess.MultiProcessCollector(scrape, path=str(directory))
    line = LineCollector()
    scrape.register(line)
    return GatewayMetrics(
        registry=scrape,
        requests=Counter("linectl_http_requests", "HTTP requests",
                         ["method", "endpoint", "status"], registry=own),
        latency=Histogram("linectl_http_request_seconds", "HTTP request latency",
                          ["method", "endpoint"], registry=own,
                          buckets=(.002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10)),
        ws_clients=Gauge("linectl_websocket_clients", "connected websocket clients", registry=own,
                         multiprocess_mode="livesum"),
        ws_fanout=Histogram("linectl_websocket_fanout_seconds",
                            "from the relay's event to its frame handed to every open socket",
                            registry=own, buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, 1)),
        ws_overflows=Counter("linectl_websocket_overflows", "streams told they fell too far behind and"
                             " closed (1013), to resume with ?after=", registry=own),
        line=line,
    )


def render(m: GatewayMetrics, snapshot: LineSnapshot) -> bytes:
    m.line.snapshot = snapshot
    return generate_latest(m.registry)


def install(app: Flask, m: GatewayMetrics, snapshot_of) -> None:
    """Time every request; serve ``/metrics`` (``snapshot_of()`` → :class:`LineSnapshot`)."""

    @app.before_request
    def _start_timer():
        g._metrics_t0 = time.perf_counter()

    @app.after_request
    def _observe(response):
        t0 = g.pop("_metrics_t0", None)
        if t0 is not None and request.path != "/ws":
            # The route pattern, not the path: ids must not explode label cardinality.
            endpoint = request.url_rule.rule if request.url_rule else "unmatched"
            m.requests.labels(request.method, endpoint, str(response.status_code)).inc()
            m.latency.labels(request.method, endpoint).observe(time.perf_counter() - t0)
        return response

    def prometheus_metrics():
        return Response(render(m, snapshot_of()), mimetype=CONTENT_TYPE)

    app.add_url_rule("/metrics", "metrics", prometheus_metrics)
