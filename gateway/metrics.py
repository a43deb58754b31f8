"""Prometheus metrics: the gateway's own (request counts and latency per
endpoint, connected websocket clients) and the line's, gathered at scrape
time: the line_controller's and the hardware service's ``status()`` RPCs
(loop queue length and lag, message handling time per type, hardware action
durations and failures per kind) and the AI job queue depth by state (one
query). One scrape target for the whole stack: the services need no HTTP
port of their own, and a service that does not answer shows as
``linectl_service_up{service=...} 0`` instead of a missing target. In a plant
of several lines every figure of a line carries a ``line`` label (its id); a
one-line plant's series have none, as before (a dashboard's ``line=~".*"``
matches both).

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
from dataclasses import dataclass, field
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
    """What one scrape gathered of one line; None where a part did not answer."""
    line_controller: dict | None = None
    hardware: dict | None = None
    database: dict | None = None  # gateway.api.health.line_figures; None: unreachable
    line_id: str | None = None  # its series' ``line`` label; None: no label (a one-line plant)
    uns: dict | None = None  # gateway.api.health.uns_figures; None: no northbound publisher

    @property
    def label_names(self) -> list[str]:
        return ["line"] if self.line_id else []

    @property
    def label_values(self) -> list[str]:
        return [self.line_id] if self.line_id else []


@dataclass
class ScrapeSnapshot:
    """What one scrape gathered: each line's, and the plant-wide AI queue's."""
    lines: list[LineSnapshot] = field(default_factory=list)
    ai_jobs: dict[str, int] | None = None
    ai_queue: dict | None = None  # services.ai_jobs.repository.queue_figures

    @property
    def label_names(self) -> list[str]:
        return self.lines[0].label_names if self.lines else []


def _add_histogram(family: HistogramMetricFamily, labels: list[str], snapshot: dict) -> None:
    bounds = snapshot.get("le", [])
    for key, s in sorted(snapshot.get("series", {}).items()):
        buckets = [(repr(float(b)), n) for b, n in zip(bounds, s["buckets"], strict=False)]
        family.add_metric([*labels, key], buckets + [("+Inf", s["count"])], s["sum"])


def _per_line(family, lines: list[LineSnapshot], value_of):
    """``family`` with each line's ``value_of(line)`` (a line whose value is None is left out)."""
    for line in lines:
        value = value_of(line)
        if value is not None:
            family.add_metric(line.label_values, value)
    return family


class LineCollector:
    """Turns the last :class:`ScrapeSnapshot` into metric families: a series per
    line (labelled ``line`` in a plant of several lines) where a figure is a line's."""

    def __init__(self):
        self.snapshot = ScrapeSnapshot()

    def collect(self):
        snap = self.snapshot
        yield from _service_families(snap)
        yield from _loop_families(snap)
        yield from _hardware_families(snap)
        yield from _ai_families(snap)
        yield from _database_families(snap)
        yield from _uns_families(snap)


def _gauge(snap: ScrapeSnapshot, name: str, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=snap.label_names)


def _service_families(snap: ScrapeSnapshot):
    up = GaugeMetricFamily("linectl_service_up", "1 when the service answered status()",
                           labels=[*snap.label_names, "service"])
    for line in snap.lines:
        up.add_metric([*line.label_values, "line_controller"], 1 if line.line_controller else 0)
        up.add_metric([*line.label_values, "hardware"], 1 if line.hardware else 0)
    yield up
    yield _per_line(_gauge(snap, "linectl_line_controller_up", "1 when the line_controller answered status()"),
                    snap.lines, lambda line: 1 if line.line_controller else 0)


def _loop_families(snap: ScrapeSnapshot):
    answered = [line for line in snap.lines if line.line_controller]
    if answered:
        yield _per_line(_gauge(snap, "linectl_loop_lag_seconds", "event-loop lag reported by the line_controller"),
                        answered, lambda line: float(line.line_controller.get("lagSeconds") or 0))
        yield _per_line(_gauge(snap, "linectl_loop_queue_length", "messages waiting in the loop"),
                        answered, lambda line: float(line.line_controller.get("queueLength") or 0))
    handling = [(line, line.line_controller["handling"]) for line in answered if line.line_controller.get("handling")]
    if handling:
        yield from _timed_with_failures(
            ("linectl_loop_message_seconds", "time to handle one loop message"),
            ("linectl_loop_messages_failed", "loop messages that failed"), "type", snap.label_names, handling)
    counted = [line for line in answered if "handledTotal" in line.line_controller]
    if counted:
        yield _per_line(CounterMetricFamily("linectl_loop_messages_handled", "loop messages handled",
                                            labels=snap.label_names),
                        counted, lambda line: line.line_controller["handledTotal"])
        yield _per_line(_gauge(snap, "linectl_loop_recovering", "1 until the start-up recovery check ran"),
                        counted, lambda line: 1 if line.line_controller.get("recovering") else 0)


def _hardware_families(snap: ScrapeSnapshot):
    answered = [line for line in snap.lines if line.hardware]
    if answered:
        yield _per_line(_gauge(snap, "linectl_plc_connected", "1 when the hardware service reaches the PLC"),
                        answered, lambda line: 1 if line.hardware.get("plcConnected") else 0)
    actions = [(line, line.hardware["actions"]) for line in answered if line.hardware.get("actions")]
    if actions:
        yield from _timed_with_failures(
            ("linectl_hardware_action_seconds", "hardware action duration"),
            ("linectl_hardware_action_failures", "hardware actions failed"), "action", snap.label_names, actions)


def _ai_families(snap: ScrapeSnapshot):
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


def _database_families(snap: ScrapeSnapshot):
    """What the scrape read from each line's tables; only ``linectl_database_up 0``
    when the database answered for no line."""
    read = [line for line in snap.lines if line.database is not None]
    yield GaugeMetricFamily("linectl_database_up", "1 when the database answered this scrape",
                            value=1 if read else 0)
    if not read:
        return
    yield _per_line(_gauge(snap, "linectl_last_event_age_seconds", "seconds since the newest event_log row"),
                    read, lambda line: line.database["lastEventAgeSeconds"])
    yield _per_line(_gauge(snap, "linectl_manual_actions_open", "manual actions waiting for an operator"),
                    read, lambda line: line.database["openManualActions"])
    yield _per_line(_gauge(snap, "linectl_manual_action_oldest_open_seconds",
                           "age of the oldest open manual action (0 when none is open)"),
                    read, lambda line: line.database["oldestOpenManualActionSeconds"])
    orders = GaugeMetricFamily("linectl_work_orders", "work orders not finished, by status",
                               labels=[*snap.label_names, "status"])
    for line in read:
        for status, n in line.database["workOrders"].items():
            orders.add_metric([*line.label_values, status], n)
    yield orders


def _uns_families(snap: ScrapeSnapshot):
    """The northbound publisher's, per line (services.uns; docs/uns.md lists them)."""
    nodes = [line for line in snap.lines if line.uns is not None]
    if not nodes:
        return
    yield _per_line(_gauge(snap, "linectl_uns_connected",
                           "1 when the line's edge node is connected to the MQTT broker (its publisher alive)"),
                    nodes, lambda line: 1 if line.uns["connected"] else 0)
    yield _per_line(_gauge(snap, "linectl_uns_backlog_events",
                           "events of the line's log the broker has not acknowledged yet"),
                    nodes, lambda line: line.uns["backlog"])
    yield _per_line(_gauge(snap, "linectl_uns_published_seq", "the event-log seq the broker acknowledged up to"),
                    nodes, lambda line: line.uns["ackedSeq"])
    yield _per_line(CounterMetricFamily("linectl_uns_messages_published", "MQTT messages published for the line",
                                        labels=snap.label_names), nodes, lambda line: line.uns["messages"])
    yield _per_line(CounterMetricFamily("linectl_uns_purged_unpublished",
                                        "events retention purged before the broker acknowledged them",
                                        labels=snap.label_names), nodes, lambda line: line.uns["purgedUnpublished"])


def _timed_with_failures(histogram: tuple[str, str], failures: tuple[str, str], label: str,
                         line_labels: list[str], per_line: list[tuple[LineSnapshot, dict]]):
    """A duration histogram per ``label`` value and its failure counter
    (``shared.stats.Durations``), for each line that reported them."""
    durations = HistogramMetricFamily(*histogram, labels=[*line_labels, label])
    failed = CounterMetricFamily(*failures, labels=[*line_labels, label])
    for line, stats in per_line:
        _add_histogram(durations, line.label_values, stats)
        for key, s in sorted(stats["series"].items()):
            failed.add_metric([*line.label_values, key], s["failures"])
    yield durations
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


def render(m: GatewayMetrics, snapshot: ScrapeSnapshot) -> bytes:
    m.line.snapshot = snapshot
    return generate_latest(m.registry)


def install(app: Flask, m: GatewayMetrics, snapshot_of) -> None:
    """Time every request; serve ``/metrics`` (``snapshot_of()`` → :class:`ScrapeSnapshot`)."""

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
