"""The request and response shapes of shifts, stops and OEE (PRODUCT.md,
"Shifts, downtime and OEE"; ``gateway.api.oee``; docs/oee.md)."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from gateway.schemas import WindowArgsSchema

_ratio = dict(allow_none=True, validate=validate.Range(min=0))  # performance may exceed 1: an ideal set too slow


def _time(**kw):
    return fields.String(metadata={"format": "date-time"}, **kw)


class OeeArgsSchema(WindowArgsSchema):
    by = fields.String(load_default="shift", validate=validate.OneOf(("shift", "day", "hour")))


class StopListArgsSchema(WindowArgsSchema):
    unassigned = fields.Boolean()
    limit = fields.Integer(load_default=1000, validate=validate.Range(min=1, max=10000))


class ShiftBreakSchema(Schema):
    from_ = _time(data_key="from")
    to = _time()


class ShiftInstanceSchema(Schema):
    name = fields.String()
    date = fields.String(metadata={"format": "date"})
    from_ = _time(data_key="from")
    to = _time()
    seconds = fields.Float()
    breaks = fields.List(fields.Nested(ShiftBreakSchema))


class ShiftListSchema(Schema):
    timezone = fields.String()
    items = fields.List(fields.Nested(ShiftInstanceSchema))


class ReasonSchema(Schema):
    code = fields.String()
    parent = fields.String(allow_none=True)
    planned = fields.Boolean()
    names = fields.Dict(keys=fields.String(), values=fields.String())


class ReasonListSchema(Schema):
    items = fields.List(fields.Nested(ReasonSchema))


class StopSchema(Schema):
    id = fields.Integer()
    lineId = fields.String()
    equipmentId = fields.String(allow_none=True)
    from_ = _time(data_key="from")
    to = _time(allow_none=True)
    seconds = fields.Float()
    cause = fields.String(allow_none=True)
    reasonCode = fields.String(allow_none=True)
    comment = fields.String(allow_none=True)
    assignedBy = fields.String(allow_none=True)
    assignedAt = _time(allow_none=True)
    splitFrom = fields.Integer(allow_none=True)


class StopListSchema(Schema):
    items = fields.List(fields.Nested(StopSchema))
    nextCursor = fields.String(allow_none=True)
    truncated = fields.Boolean()


class SplitResultSchema(Schema):
    id = fields.Integer()
    lineId = fields.String()
    stops = fields.List(fields.Nested(StopSchema))


class ParetoItemSchema(Schema):
    reasonCode = fields.String()
    seconds = fields.Float()
    stops = fields.Integer()
    cumulativeShare = fields.Float(allow_none=True)


class ParetoSchema(Schema):
    from_ = _time(data_key="from")
    to = _time()
    items = fields.List(fields.Nested(ParetoItemSchema))


class StateItemSchema(Schema):
    state = fields.String(validate=validate.OneOf(("RUNNING", "IDLE", "DOWN", "PLANNED_DOWN", "NOT_SCHEDULED")))
    cause = fields.String(allow_none=True)
    equipmentId = fields.String(allow_none=True)
    from_ = _time(data_key="from")
    to = _time()


class StateListSchema(Schema):
    items = fields.List(fields.Nested(StateItemSchema))


class OeeItemSchema(Schema):
    lineId = fields.String(allow_none=True)
    from_ = _time(data_key="from")
    to = _time()
    shift = fields.String(allow_none=True)
    date = fields.String(allow_none=True)
    shiftSeconds = fields.Float()
    plannedDowntimeSeconds = fields.Float()
    plannedBusySeconds = fields.Float()
    downSeconds = fields.Float()
    actualProductionSeconds = fields.Float()
    stops = fields.Integer()
    microStops = fields.Integer()
    microStopSeconds = fields.Float()
    produced = fields.Integer()
    good = fields.Integer()
    scrapped = fields.Integer()
    idealSeconds = fields.Float()
    producedByProduct = fields.Dict(keys=fields.String(), values=fields.Integer())
    productsWithoutIdeal = fields.List(fields.String())
    availability = fields.Float(**_ratio)
    performance = fields.Float(**_ratio)
    quality = fields.Float(**_ratio)
    oee = fields.Float(**_ratio)
    mtbfSeconds = fields.Float(allow_none=True)
    mttrSeconds = fields.Float(allow_none=True)


class OeeSchema(Schema):
    from_ = _time(data_key="from")
    to = _time()
    by = fields.String()
    timezone = fields.String()
    items = fields.List(fields.Nested(OeeItemSchema))
    plant = fields.List(fields.Nested(OeeItemSchema))


class StopReasonSchema(Schema):
    reasonCode = fields.String(required=True, validate=validate.Length(min=1, max=64))
    comment = fields.String(allow_none=True, validate=validate.Length(max=200))


class SplitStopSchema(Schema):
    at = fields.String(required=True, validate=validate.Length(min=1, max=64), metadata={"format": "date-time"})


class PlannedDowntimeSchema(Schema):
    from_ = fields.String(data_key="from", required=True, validate=validate.Length(min=1, max=64),
                          metadata={"format": "date-time"})
    to = fields.String(required=True, validate=validate.Length(min=1, max=64), metadata={"format": "date-time"})
    reason = fields.String(required=True, validate=validate.Length(min=1, max=200))


class PlannedDowntimeResultSchema(Schema):
    id = fields.Integer()
    lineId = fields.String()
    from_ = _time(data_key="from")
    to = _time()
    reason = fields.String()
    createdBy = fields.String(allow_none=True)
    createdAt = _time()
