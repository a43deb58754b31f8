"""Prometheus metrics: request counts and latency per endpoint, connected
websocket clients, and the loop's lag as its ``status()`` reports it.

Each app has its own registry (several apps in one test process must not clash)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from flask import Flask, Response, g, request
from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


@dataclass
class GatewayMetrics:
    registry: CollectorRegistry
    requests: Counter
    latency: Histogram
    ws_clients: Gauge
    loop_lag: Gauge
    loop_queue: Gauge
    loop_up: Gauge


def create() -> GatewayMetrics:
    reg = CollectorRegistry()
    return GatewayMetrics(
        registry=reg,
        requests=Counter("linectl_http_requests", "HTTP requests",
                         ["method", "endpoint", "status"], registry=reg),
        latency=Histogram("linectl_http_request_seconds", "HTTP request latency",
                          ["method", "endpoint"], registry=reg,
                          buckets=(.002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10)),
        ws_clients=Gauge("linectl_websocket_clients", "connected websocket clients", registry=reg),
        loop_lag=Gauge("linectl_loop_lag_seconds", "event-loop lag reported by the line_controller",
                       registry=reg),
        loop_queue=Gauge("linectl_loop_queue_length", "messages waiting in the loop", registry=reg),
        loop_up=Gauge("linectl_line_controller_up", "1 when the line_controller answered status()",
                      registry=reg),
    )


def render(m: GatewayMetrics, status: dict | None) -> bytes:
    m.loop_up.set(1 if status else 0)
    if status:
        m.loop_lag.set(float(status.get("lagSeconds") or 0))
        m.loop_queue.set(float(status.get("queueLength") or 0))
    return generate_latest(m.registry)


def install(app: Flask, m: GatewayMetrics, status_of) -> None:
    """Time every request; serve ``/metrics`` (``status_of()`` → loop status or None)."""

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
        return Response(render(m, status_of()), mimetype=CONTENT_TYPE)

    app.add_url_rule("/metrics", "metrics", prometheus_metrics)
