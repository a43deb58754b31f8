"""What a loop transaction sends out once it commits: its events (``line_events``)
and its hardware requests. With an outbox (``uow.outbox``: pgsql:// on the loop's
own database, ``shared.transport.pgsql.outbox``) both are published in the
transaction itself, before its commit: no commit of their own, and nothing if it
does not commit. A staged request's reply is awaited once it has committed."""

from __future__ import annotations

import logging

log = logging.getLogger("services.line_controller.loop")


class Outgoing:
    """The EventLoop's sending half (a mixin: ``self`` is the loop)."""

    def _stage(self, work, requests=()) -> dict:
        """Publish ``work``'s frames and ``requests`` in its transaction; the staged
        requests by task id (the others are sent as usual after the commit)."""
        if not (self.uow.outbox and work.frames):
            return {}
        stage = getattr(self.hardware, "stage", None)
        with work.publishing(self.uow.outbox_role):
            self._publish(work)
            staged = {req.task_id: stage(req) for req in requests} if stage is not None else {}
        work.published = True
        return {task_id: handle for task_id, handle in staged.items() if handle is not None}

    def _publish(self, work) -> None:
        if not work.frames or work.published:
            return
        try:
            self.publish(work.tx_id, work.frames)
        except Exception:  # the event log has them; clients fill gaps from it
            log.exception("publishing tx %s failed", work.tx_id)

    def _discard(self, staged: dict) -> None:
        for handle in staged.values():  # their transaction did not commit: nothing was sent
            self.hardware.discard(handle)

    def _send(self, requests, staged: dict | None = None) -> None:
        for req in requests:
            if self.hardware is None:
                log.warning("no hardware port: task %s not sent", req.task_id)
            elif staged and req.task_id in staged:
                self.hardware.sent(staged[req.task_id])  # committed: its reply is awaited
            else:
                self.hardware.request(req)
