"""marshmallow schemas: request validation and the response shapes of the
OpenAPI document. An entity's response schema is made from its declaration in
``shared.wire`` (:func:`schema_of`), the one ``shared.serialize`` dumps with,
so the document and the JSON cannot drift apart; composite answers are
declared here, from those."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from shared import wire

MAX_ID = 2**63 - 1  # PostgreSQL bigint
MAX_STRING = 200

_id = dict(strict=True, validate=validate.Range(min=1, max=MAX_ID))


def _text(**kw):
    return fields.String(validate=validate.Length(max=MAX_STRING), **kw)


def _nullable_str():
    return fields.String(allow_none=True)


def _nullable_int():
    return fields.Integer(allow_none=True)


def _time():
    return fields.String(allow_none=True, metadata={"format": "date-time"})


# -- errors -------------------------------------------------------------------


class ErrorBodySchema(Schema):
    code = fields.String(required=True)
    message = fields.String(required=True)


class ErrorSchema(Schema):
    error = fields.Nested(ErrorBodySchema, required=True)


# -- requests -----------------------------------------------------------------


class CreateOrderSchema(Schema):
    productId = fields.String(required=True, validate=validate.Length(min=1, max=64))
    quantity = fields.Integer(required=True, strict=True, validate=validate.Range(min=1, max=10000))
    priority = fields.Integer(strict=True, validate=validate.Range(min=0, max=9))
    code = fields.String(validate=validate.Length(min=1, max=MAX_STRING))


class NoteSchema(Schema):
    note = _text()


class ReworkSchema(NoteSchema):
    stepIndex = fields.Integer(strict=True, validate=validate.Range(min=0, max=1000))


class ResolveSchema(NoteSchema):
    resolution = fields.String(required=True, validate=validate.Length(min=1, max=64))


class RecoveryConfirmSchema(Schema):
    manualActionIds = fields.List(fields.Integer(**_id), validate=validate.Length(max=1000))


class ShelveSchema(Schema):
    minutes = fields.Integer(required=True, strict=True, validate=validate.Range(min=1, max=1440))
    reason = fields.String(required=True, validate=validate.Length(min=1, max=MAX_STRING))


class WindowArgsSchema(Schema):
    """A time window: ISO-8601 instants (no offset: UTC); parsed by gateway.api.stats."""
    from_ = fields.String(data_key="from", validate=validate.Length(min=1, max=64),
                          metadata={"format": "date-time"})
    to = fields.String(validate=validate.Length(min=1, max=64), metadata={"format": "date-time"})


class TimelineArgsSchema(WindowArgsSchema):
    equipmentId = fields.String(validate=validate.Length(min=1, max=64))
    limit = fields.Integer(load_default=10000, validate=validate.Range(min=1, max=10000))


class ListArgsSchema(Schema):
    limit = fields.Integer(load_default=50, validate=validate.Range(min=1, max=500))
    cursor = fields.String(validate=validate.Regexp(r"^[0-9]{1,19}$", error="not a cursor"))


class StatusListArgsSchema(ListArgsSchema):
    status = fields.String(validate=validate.Length(min=1, max=MAX_STRING))


class AlarmListArgsSchema(StatusListArgsSchema):
    """Alarm history: any of these filters; ``from``/``to`` bound ``raisedAt``."""
    code = fields.String(validate=validate.Length(min=1, max=64))
    equipmentId = fields.String(validate=validate.Length(min=1, max=64))
    severity = fields.String(validate=validate.Length(min=1, max=MAX_STRING))
    from_ = fields.String(data_key="from", validate=validate.Length(min=1, max=64),
                          metadata={"format": "date-time"})
    to = fields.String(validate=validate.Length(min=1, max=64), metadata={"format": "date-time"})


class OrderListArgsSchema(StatusListArgsSchema):
    pass


class JobListArgsSchema(StatusListArgsSchema):
    workOrderId = fields.Integer(validate=validate.Range(min=1, max=MAX_ID))


class EventListArgsSchema(Schema):
    after = fields.Integer(load_default=0, validate=validate.Range(min=0, max=MAX_ID))
    limit = fields.Integer(load_default=50, validate=validate.Range(min=1, max=500))


# -- responses (shared.wire shapes) ----------------------------------------------

_FIELD_OF_KIND = {
    "integer": fields.Integer,
    "string": fields.String,
    "boolean": fields.Boolean,
    "object": fields.Dict,
    "any": fields.Raw,
}


def _field(kind: wire.WireType) -> fields.Field:
    if kind.kind == "date-time":
        return _time()
    if kind.kind == "array":
        return fields.List(fields.String())
    return _FIELD_OF_KIND[kind.kind](allow_none=kind.nullable)


def schema_of(shape: wire.Shape, **extra: fields.Field) -> type[Schema]:
    """The schema ``<Shape>Schema`` of a wire shape, plus ``extra`` fields."""
    declared = {f.name: _field(f.type) for f in shape.fields}
    return type(f"{shape.name}Schema", (Schema,), {**declared, **extra})



def _line_id():
    return fields.String(metadata={"description": "the line the object belongs to"})


# Every object of a line-control path, and every event frame, names its line.
WorkOrderSchema = schema_of(wire.WORK_ORDER, lineId=_line_id())
JobSchema = schema_of(wire.JOB, lineId=_line_id())
TaskSchema = schema_of(wire.TASK, lineId=_line_id())
AlarmSchema = schema_of(wire.ALARM, lineId=_line_id())
ManualActionSchema = schema_of(wire.MANUAL_ACTION, lineId=_line_id())
EventFrameSchema = schema_of(wire.EVENT_FRAME, lineId=_line_id())
SlotStateSchema = schema_of(wire.SLOT_STATE)
TaskBriefSchema = schema_of(wire.TASK_BRIEF)


class CommandOutcomeSchema(Schema):
    commandId = fields.String()
    lineId = _line_id()
    type = fields.String()
    status = fields.String()
    result = fields.Dict(allow_none=True)
    createdAt = _time()
    handledAt = _time()
    error = fields.Nested(ErrorBodySchema)


class AcceptedSchema(Schema):
    commandId = fields.String(required=True)
    lineId = _line_id()


class ConfirmedSchema(Schema):
    confirmed = fields.List(fields.Integer())


EquipmentSchema = schema_of(wire.EQUIPMENT, slots=fields.List(fields.Nested(SlotStateSchema)), lineId=_line_id())


class BufferSlotSchema(Schema):
    slotNo = fields.Integer()
    jobId = _nullable_int()


class BufferSchema(Schema):
    slots = fields.List(fields.Nested(BufferSlotSchema))


def page_of(item_schema):
    """``{"items": [...], "nextCursor": str | null}`` of ``item_schema``."""
    return type(
        f"{item_schema.__name__.removesuffix('Schema')}PageSchema",
        (Schema,),
        {
            "items": fields.List(fields.Nested(item_schema)),
            "nextCursor": fields.String(allow_none=True),
        },
    )


class GapSchema(Schema):
    from_ = fields.Integer(data_key="from", metadata={"description": "the first seq no longer kept"})
    to = fields.Integer(metadata={"description": "the last seq no longer kept"})


class EventPageSchema(page_of(EventFrameSchema)):
    gap = fields.Nested(GapSchema, metadata={"description": "present when retention purged events "
                                                            "after `after`"})


class EquipmentListSchema(Schema):
    items = fields.List(fields.Nested(EquipmentSchema))


class LineSchema(Schema):
    id = fields.String()
    name = fields.String()
    bufferSlots = fields.Integer()
    dock = fields.Dict()
    robot = fields.Dict()
    tools = fields.List(fields.Dict())
    equipment = fields.List(fields.Dict())


class ProductListSchema(Schema):
    items = fields.List(fields.Dict())


# -- production figures (shared.production_stats) -------------------------------


def _ratio():
    return fields.Float(allow_none=True, validate=validate.Range(min=0, max=1))


class OverWindowSchema(Schema):
    """Figures over a window of time: its ``from`` and ``to``, then the figures."""
    from_ = fields.String(data_key="from", metadata={"format": "date-time"})
    to = fields.String(metadata={"format": "date-time"})


class OutputFiguresSchema(Schema):
    """What a line (or the plant) turned out: ``/api/stats``' and ``/api/plant/stats``'."""
    completed = fields.Integer()
    scrapped = fields.Integer()
    throughputPerHour = fields.Float(allow_none=True)
    scrapRate = _ratio()


class LineFiguresSchema(OutputFiguresSchema):
    observedSeconds = fields.Float()


class MachineFiguresSchema(Schema):
    id = fields.String()
    utilization = _ratio()
    availability = _ratio()
    performance = _ratio()
    quality = _ratio()
    oee = _ratio()
    cycles = fields.Integer()
    meanCycleSeconds = fields.Float(allow_none=True)
    p95CycleSeconds = fields.Float(allow_none=True)
    idealCycleSeconds = fields.Float()
    observedSeconds = fields.Float()
    secondsByState = fields.Dict(keys=fields.String(), values=fields.Float())


class HourFiguresSchema(Schema):
    from_ = fields.String(data_key="from", metadata={"format": "date-time"})
    completed = fields.Integer()
    scrapped = fields.Integer()


class StatsSchema(OverWindowSchema):
    line = fields.Nested(LineFiguresSchema)
    equipment = fields.List(fields.Nested(MachineFiguresSchema))
    hourly = fields.List(fields.Nested(HourFiguresSchema))


class TimelineItemSchema(Schema):
    equipmentId = fields.String()
    state = fields.String(validate=validate.OneOf(("PROCESSING", "IDLE", "WAITING_UNLOAD", "FAULT")))
    from_ = fields.String(data_key="from", metadata={"format": "date-time"})
    to = fields.String(metadata={"format": "date-time"})


class TimelineSchema(Schema):
    items = fields.List(fields.Nested(TimelineItemSchema))
    truncated = fields.Boolean()


class AlarmCountSchema(Schema):
    code = fields.String()
    count = fields.Integer()
    open = fields.Integer()
    lastRaisedAt = _time()


class AlarmCountsSchema(OverWindowSchema):
    items = fields.List(fields.Nested(AlarmCountSchema))


class RouteStepSchema(Schema):
    index = fields.Integer()
    op = fields.String()
    equipmentKind = _nullable_str()
    state = fields.String(validate=validate.OneOf(("DONE", "CURRENT", "TODO")))
    startedAt = _time()
    finishedAt = _time()
    equipmentIds = fields.List(fields.String())
    tasks = fields.List(fields.Nested(TaskBriefSchema))


class JobRouteSchema(Schema):
    jobId = fields.Integer()
    lineId = _line_id()
    workOrderId = fields.Integer()
    status = fields.String()
    stepIndex = fields.Integer()
    arrival = fields.List(fields.Nested(TaskBriefSchema))
    departure = fields.List(fields.Nested(TaskBriefSchema))
    finishedAt = _time()
    steps = fields.List(fields.Nested(RouteStepSchema))


# -- the plant (gateway.api.plant) ------------------------------------------------


class LineSummarySchema(Schema):
    id = fields.String()
    name = fields.String()
    controller = fields.String(validate=validate.OneOf(("UP", "DOWN")), metadata={
        "description": "UP while the line's controller runs: its commands are sent, not refused 503"})
    plc = fields.String(validate=validate.OneOf(("CONNECTED", "DISCONNECTED")), metadata={
        "description": "CONNECTED when the line's hardware service says it reaches its PLC"})
    plcIdentity = fields.String(allow_none=True, metadata={
        "description": "the identity the PLC at the line's address published at its last connect "
                       "(deploy/REGISTER_MAP.md, \"Identity block\"); null when unknown or it publishes none"})
    activeOrders = fields.Integer(metadata={"description": "work orders not finished"})
    openAlarms = fields.Integer(metadata={"description": "alarms raised or acknowledged (the active list)"})
    openManualActions = fields.Integer()


class LineOutputSchema(OutputFiguresSchema):
    id = fields.String()


class PlantStatsSchema(OverWindowSchema):
    plant = fields.Nested(OutputFiguresSchema)
    lines = fields.List(fields.Nested(LineOutputSchema))


class UnsLineSchema(Schema):
    id = fields.String()
    publishedSeq = fields.Integer(allow_none=True,
                                  metadata={"description": "the line's last seq the broker acknowledged"})
    logSeq = fields.Integer(metadata={"description": "the line's newest event-log seq"})
    backlog = fields.Integer(allow_none=True, metadata={"description": "events not yet acknowledged by the broker"})


class UnsStatusSchema(Schema):
    """``GET /api/plant/uns`` (docs/uns.md)."""
    connected = fields.Boolean()
    format = fields.String(allow_none=True)
    lines = fields.List(fields.Nested(UnsLineSchema))
