"""Reading the gateway's Prometheus exposition (``/metrics``) in tests."""

from __future__ import annotations


def missing_series(exposition: str, *series: str) -> list[str]:
    """Which of ``series`` (whole sample lines, value included) ``exposition`` lacks:
    a failing assert names every one, not the first."""
    return [line for line in series if line not in exposition]
