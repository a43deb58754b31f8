"""A line's event log over REST (``/api/events?after=``, ``/api/lines/{lineId}/events``);
``/ws`` streams it live. Each line has its own log and its own gapless ``seq``."""

from __future__ import annotations

from gateway import event_log, schemas
from gateway.api.blueprint import LineBlueprint
from gateway.api.common import query_view, read_session, reply
from gateway.context import current_line

blp = LineBlueprint("events", __name__, description="the event log")


@query_view(blp, "/events", schemas.EventListArgsSchema, schemas.EventPageSchema)
def list_events(args):
    """Events with ``seq > after`` in order; ``nextCursor`` is the ``after`` of the next page.
    When retention purged some of them, ``gap`` names the missing seqs ``{from, to}``."""
    with read_session() as session:
        items = event_log.page(session, args["after"], args["limit"], current_line().id)
    next_cursor = str(items[-1]["seq"]) if len(items) == args["limit"] else None
    body = {"items": items, "nextCursor": next_cursor}
    if items and (gap := event_log.gap_before(items[0]["seq"], args["after"])):
        body["gap"] = gap
    return reply(body)
