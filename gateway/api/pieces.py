"""Piece traceability (PRODUCT.md, "Piece traceability"): a line's pieces by
serial, order, status, time or machine (``GET /api/pieces``, paged, or streamed
as CSV with ``Accept: text/csv``), one piece's whole record
(``GET /api/pieces/{serial}``), and a serial looked up on every line of the
plant (``GET /api/plant/pieces?serial=``). Read-only, from the records the
loop writes (``shared.piece_query``)."""

from __future__ import annotations

from gateway import piece_schemas, schemas
from gateway.api.blueprint import Blueprint, LineBlueprint
from gateway.api.common import (
    of_line,
    parse_instant,
    parse_statuses,
    query_view,
    read_session,
    reply,
)
from gateway.api.csv_reply import csv_response, wants_csv
from gateway.auth import visible_lines
from gateway.context import current_line
from gateway.errors import ApiError
from shared import piece_query as pq
from shared.db.models import JOB_STATUSES

blp = LineBlueprint("pieces", __name__, description="piece traceability: each piece's history by its serial")
plant_blp = Blueprint("plant_pieces", __name__, url_prefix="/api", description="a piece on any line of the plant")

CSV_BATCH = 500  # pieces per keyset batch of a streamed CSV
PLANT_LIMIT = 500  # pieces of one serial per line (a label is one piece; a reused one, a few)


def _filter(args: dict) -> pq.PieceFilter:
    start, end = parse_instant("from", args.get("from_")), parse_instant("to", args.get("to"))
    if start is not None and end is not None and start >= end:
        raise ApiError(400, "VALIDATION_ERROR", "from: must be before to")
    statuses = parse_statuses(args.get("status"), JOB_STATUSES)
    return pq.PieceFilter(serial=args.get("serial"), work_order_id=args.get("workOrderId"),
                          statuses=tuple(statuses) if statuses else None, from_=start, to=end,
                          equipment_id=args.get("equipmentId"))


@query_view(blp, "/pieces", piece_schemas.PieceListArgsSchema, piece_schemas.PiecePageSchema)
def list_pieces(args):
    """The line's pieces, oldest first; ``Accept: text/csv``: every matching piece's
    whole record, streamed (no paging: ``limit`` and ``cursor`` do not apply)."""
    f = _filter(args)
    if wants_csv():
        line = current_line()
        rows = (pq.csv_row(line.id, record) for record in pq.records(read_session, f, CSV_BATCH))
        return csv_response(rows, pq.CSV_COLUMNS, f"pieces-{line.id}")
    with read_session() as session:
        try:
            items, nxt = pq.list_pieces(session, f, args["limit"], args.get("cursor"))
        except pq.BadCursor:
            raise ApiError(400, "VALIDATION_ERROR", "cursor: not a cursor") from None
    return reply({"items": [of_line(i) for i in items], "nextCursor": nxt})


@query_view(blp, "/pieces/<serial>", None, piece_schemas.PieceSchema, 401, 403, 404)
def get_piece(serial):
    """A piece's whole record: its steps, robot moves, scans, marks, alarms and the
    operators' answers that touched it."""
    if not 1 <= len(serial) <= schemas.MAX_STRING:
        raise ApiError(404, "NOT_FOUND", "piece not found")
    with read_session() as session:
        record = pq.piece_by_serial(session, serial)
    if record is None:
        raise ApiError(404, "NOT_FOUND", f"piece {serial} not found")
    return reply(of_line(record))


@query_view(plant_blp, "/plant/pieces", piece_schemas.PlantPieceArgsSchema, piece_schemas.PiecePageSchema)
def find_on_every_line(args):
    """The pieces with this serial on every line the caller may see (a line without
    tables yet has none)."""
    serial = pq.PieceFilter(serial=args["serial"])
    items = [line.of_line(piece) for line in visible_lines()
             for piece in line.read(lambda session: pq.list_pieces(session, serial, PLANT_LIMIT)[0], [])]
    return reply({"items": items, "nextCursor": None})
