"""The operator's commands about downtime (PRODUCT.md, "Shifts, downtime and
OEE"): a reason on a stop, a stop split in two, planned downtime. Registered
with the loop's other messages (:mod:`.messages`); each goes through the loop
(one writer) and its audit row names the person."""

from __future__ import annotations

from datetime import timedelta

from .messages import command
from .payloads import ValidationError, instant, key, row_id

MAX_COMMENT = 200
MAX_PLANNED = timedelta(days=31)


@command
class AssignStopReason:
    """A reason (a code of the plant's reason tree, checked by the gateway) and a comment on a stop."""
    stop_id: int = row_id("stopId")
    reason_code: str = key("reasonCode")
    comment: str | None = None

    def validate(self):
        if not isinstance(self.reason_code, str) or not 1 <= len(self.reason_code) <= 64:
            raise ValidationError("reasonCode", "expected a reason code")
        if self.comment is not None and (not isinstance(self.comment, str) or len(self.comment) > MAX_COMMENT):
            raise ValidationError("comment", f"at most {MAX_COMMENT} characters")


@command
class SplitStop:
    """A stop in two at ``at`` (an instant within it)."""
    stop_id: int = row_id("stopId")
    at: str = key("at")

    def validate(self):
        instant("at", self.at)


@command
class AddPlannedDowntime:
    """Planned downtime beside the calendar: maintenance, a changeover."""
    start: str = key("from")
    end: str = key("to")
    reason: str = key("reason")

    def validate(self):
        start, end = instant("from", self.start), instant("to", self.end)
        if end <= start:
            raise ValidationError("to", "must be after from")
        if end - start > MAX_PLANNED:
            raise ValidationError("to", f"planned downtime is at most {MAX_PLANNED.days} days")
        if not isinstance(self.reason, str) or not 1 <= len(self.reason.strip()) <= 200:
            raise ValidationError("reason", "1..200 characters")
