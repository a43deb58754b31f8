"""Duration histograms that a service reports through its ``status()`` RPC, so
the gateway's ``/metrics`` can expose them in Prometheus format (plain JSON:
the services need no HTTP endpoint of their own)."""

from __future__ import annotations

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
           60.0, 120.0)


class Durations:
    """Cumulative histograms (count, sum, failures, bucket counts) per key."""

    def __init__(self, buckets: tuple[float, ...] = BUCKETS):
        self.buckets = buckets
        self._series: dict[str, dict] = {}

    def observe(self, key: str, seconds: float, failed: bool = False) -> None:
        s = self._series.get(key)
        if s is None:
            s = self._series[key] = {"count": 0, "sum": 0.0, "failures": 0,
                                     "buckets": [0] * len(self.buckets)}
        s["count"] += 1
        s["sum"] += seconds
        s["failures"] += int(failed)
        for i, bound in enumerate(self.buckets):
            if seconds <= bound:
                s["buckets"][i] += 1

    def snapshot(self) -> dict:
        """``{"le": [bounds], "series": {key: {count, sum, failures, buckets}}}``."""
        return {"le": list(self.buckets),
                "series": {k: {**v, "sum": round(v["sum"], 6), "buckets": list(v["buckets"])}
                           for k, v in self._series.items()}}
