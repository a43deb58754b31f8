"""marshmallow schemas of piece traceability (PRODUCT.md, "Piece traceability";
``shared.piece_query`` reads what they describe)."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from gateway.schemas import MAX_ID, MAX_STRING, WindowArgsSchema, _line_id, _nullable_int, _nullable_str, _time, page_of


class PieceListArgsSchema(WindowArgsSchema):
    """Filters of ``GET /api/pieces``; ``from``/``to`` bound ``createdAt``, or, with
    ``equipmentId``, the steps on that machine (what else ran on it then)."""
    serial = fields.String(validate=validate.Length(min=1, max=MAX_STRING))
    workOrderId = fields.Integer(validate=validate.Range(min=1, max=MAX_ID))
    status = fields.String(validate=validate.Length(min=1, max=MAX_STRING))
    equipmentId = fields.String(validate=validate.Length(min=1, max=64))
    limit = fields.Integer(load_default=50, validate=validate.Range(min=1, max=500))
    cursor = fields.String(validate=validate.Regexp(r"^[0-9]{1,19}_[0-9]{1,19}$", error="not a cursor"))


class PlantPieceArgsSchema(Schema):
    serial = fields.String(required=True, validate=validate.Length(min=1, max=MAX_STRING))


class PieceStepSchema(Schema):
    stepIndex = fields.Integer()
    kind = fields.String()
    equipmentId = _nullable_str()
    slotNo = _nullable_int()
    startedAt = _time()
    endedAt = _time()
    result = _nullable_str()
    values = fields.Dict()


class PieceSummarySchema(Schema):
    serial = fields.String()
    lineId = _line_id()
    jobId = fields.Integer()
    workOrderId = fields.Integer()
    workOrderCode = _nullable_str()
    productId = _nullable_str()
    status = fields.String()
    createdAt = _time()
    finishedAt = _time()
    steps = fields.List(fields.Nested(PieceStepSchema), metadata={
        "description": "with equipmentId: the piece's steps on that machine"})


class PieceAnswerSchema(Schema):
    manualActionId = fields.Integer()
    kind = fields.String()
    resolution = _nullable_str()
    by = _nullable_str()
    at = _time()
    note = _nullable_str()


class PieceSchema(PieceSummarySchema):
    moves = fields.List(fields.Dict())
    scans = fields.List(fields.Dict())
    marks = fields.List(fields.Dict())
    alarms = fields.List(fields.Dict())
    answers = fields.List(fields.Nested(PieceAnswerSchema))


PiecePageSchema = page_of(PieceSummarySchema)
