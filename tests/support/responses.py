"""What the tests read off the gateway's error responses."""

from __future__ import annotations


def err(r):
    """A Flask test response's status and its error code."""
    return r.status_code, r.get_json()["error"]["code"]
