"""Logging for every linectl process: readable text by default, one JSON
object per line with ``LINECTL_LOG_FORMAT=json`` (for log shippers)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime


class JsonFormatter(logging.Formatter):
    def __init__(self, process_name: str):
        super().__init__()
        self.process_name = process_name

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "level": record.levelname,
            "process": self.process_name,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        for key in ("commandId", "messageId", "taskId", "jobId", "workOrderId"):
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str = "INFO", fmt: str = "text", process_name: str = "linectl") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(process_name))
    else:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s %(levelname)s {process_name} %(name)s: %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Chatty libraries stay at WARNING unless we debug.
    if level != "DEBUG":
        for name in ("kombu", "amqp", "nameko", "pymodbus", "werkzeug", "alembic"):
            logging.getLogger(name).setLevel(logging.WARNING)
