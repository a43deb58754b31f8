"""The JSON shape of every entity the API returns, declared once.

A :class:`Shape` names its fields in wire order, each with a :class:`WireType`.
Two things derive from it: ``shared.serialize`` (and the AI repository) turn a
row into its JSON with :meth:`Shape.dump`, for API responses and websocket
events alike; ``gateway.schemas`` turns each shape into the marshmallow schema
that ``/openapi.json`` publishes. A field's source is the row attribute of the
same name in snake_case (``productId`` → ``product_id``). Plain Python: no
framework here, so the loop, the AI queue and the gateway may all import it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import attrgetter


def iso(value: datetime | None) -> str | None:
    """ISO-8601 in UTC with a ``Z``; a naive time is taken as UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class WireType:
    """``kind``: the JSON type (``date-time`` is a string in that format);
    ``convert`` turns the row's value into it (None: as it is)."""

    kind: str
    nullable: bool = False
    convert: Callable | None = None


def _object(value):
    return value or {}


def _strings(value):
    return list(value or [])


INT = WireType("integer")
NULL_INT = WireType("integer", nullable=True)
STR = WireType("string")
NULL_STR = WireType("string", nullable=True)
BOOL = WireType("boolean")
TIME = WireType("date-time", nullable=True, convert=iso)
OBJECT = WireType("object", convert=_object)  # a NULL column reads as {}
NULL_OBJECT = WireType("object", nullable=True)
STRINGS = WireType("array", convert=_strings)  # a list of strings; NULL reads as []
ANY = WireType("any", nullable=True)  # any JSON value (an AI job's output)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def camel(name: str) -> str:
    return re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), name)


def camel_facts(facts):
    """An alarm's or manual action's facts as the API shows them: keys in
    camelCase (``job_id`` → ``jobId``), inside lists and objects too."""
    if isinstance(facts, dict):
        return {camel(str(k)): camel_facts(v) for k, v in facts.items()}
    if isinstance(facts, (list, tuple)):
        return [camel_facts(v) for v in facts]
    return facts


@dataclass(frozen=True)
class Field:
    name: str
    type: WireType
    attr: str


class Shape:
    """An entity's JSON: ``Shape("WorkOrder", id=INT, productId=STR, …)``.

    ``dump`` reads every attribute with one ``attrgetter`` and converts only
    the fields that need it: it runs for every event the loop writes."""

    def __init__(self, name: str, /, **types: WireType):
        self.name = name
        self.fields = tuple(Field(key, kind, _snake(key)) for key, kind in types.items())
        self._keys = tuple(f.name for f in self.fields)
        self._read = attrgetter(*(f.attr for f in self.fields))
        self._converts = tuple((f.name, f.type.convert) for f in self.fields if f.type.convert)

    def only(self, name: str, *keys: str) -> Shape:
        """A shape of some of these fields (a brief form of the entity)."""
        kinds = {f.name: f.type for f in self.fields}
        return Shape(name, **{key: kinds[key] for key in keys})

    def dump(self, row) -> dict:
        """The JSON of anything with the attributes (an ORM object or a ``Row``)."""
        out = dict(zip(self._keys, self._read(row), strict=True))
        for key, convert in self._converts:
            out[key] = convert(out[key])
        return out


# -- line control ---------------------------------------------------------------

WORK_ORDER = Shape(
    "WorkOrder", id=INT, code=STR, productId=STR, quantity=INT, priority=INT, status=STR,
    completedQty=INT, scrappedQty=INT, version=INT,
    createdAt=TIME, updatedAt=TIME, startedAt=TIME, finishedAt=TIME,
)
JOB = Shape(
    "Job", id=INT, workOrderId=INT, seqNo=INT, status=STR, heldStatus=NULL_STR,
    positionType=STR, positionRefId=NULL_STR, tempSlotNo=NULL_INT, stepIndex=INT,
    context=OBJECT, version=INT, errorCode=NULL_STR,
    createdAt=TIME, updatedAt=TIME, finishedAt=TIME, serial=NULL_STR,
)
SLOT = Shape("Slot", equipmentId=STR, slotNo=INT, status=STR, currentJobId=NULL_INT)
# A slot inside its machine's JSON (``GET /api/equipment``).
SLOT_STATE = SLOT.only("SlotState", "slotNo", "status", "currentJobId")
EQUIPMENT = Shape("Equipment", id=STR, name=STR, kind=STR, batch=BOOL, status=STR, slotCount=INT)
TASK = Shape(
    "Task", id=INT, kind=STR, status=STR, jobId=NULL_INT, workOrderId=NULL_INT,
    equipmentId=NULL_STR, slotNo=NULL_INT, params=OBJECT,
    errorCode=NULL_STR, errorMessage=NULL_STR,
    deadlineAt=TIME, createdAt=TIME, startedAt=TIME, finishedAt=TIME,
)
# A task in a job's route (``GET /api/jobs/{id}/route``).
TASK_BRIEF = TASK.only("TaskBrief", "id", "kind", "status", "equipmentId", "startedAt", "finishedAt")
ALARM = Shape(
    "Alarm", id=INT, code=STR, severity=STR, status=STR, message=STR,
    equipmentId=NULL_STR, jobId=NULL_INT, taskId=NULL_INT,
    raisedAt=TIME, acknowledgedAt=TIME, acknowledgedBy=NULL_STR,
    clearedAt=TIME, clearedBy=NULL_STR,
    shelvedUntil=TIME, shelveReason=NULL_STR, shelvedBy=NULL_STR, shelvedAt=TIME, facts=OBJECT,
)
MANUAL_ACTION = Shape(
    "ManualAction", id=INT, kind=STR, status=STR, text=STR, choices=STRINGS,
    jobId=NULL_INT, equipmentId=NULL_STR, alarmId=NULL_INT, context=OBJECT, facts=OBJECT,
    resolution=NULL_STR, note=NULL_STR, resolvedBy=NULL_STR, resolvedAt=TIME, createdAt=TIME,
)
EVENT_FRAME = Shape("EventFrame", seq=INT, txId=INT, type=STR, at=TIME, payload=OBJECT)

# -- AI Runtime jobs ----------------------------------------------------------------

AI_JOB = Shape(
    "AiJob", id=STR, userId=STR, jobType=STR, targetType=STR, targetId=STR,
    snapshotId=NULL_STR, params=OBJECT, status=STR, priority=INT, idempotencyKey=NULL_STR,
    apiKeyMode=STR, credentialId=NULL_STR, modelProvider=STR, modelName=STR,
    promptVersion=NULL_STR, outputSchemaVersion=NULL_STR, attemptNo=INT,
    retriedFromJobId=NULL_STR, lockedBy=NULL_STR, lockedAt=TIME, lockUntil=TIME,
    startedAt=TIME, finishedAt=TIME, retryCount=INT, maxRetryCount=INT, timeoutSeconds=INT,
    cancelRequested=BOOL, availableAt=TIME, errorCode=NULL_STR, errorMessage=NULL_STR,
    createdAt=TIME, updatedAt=TIME,
)
# What a poll offers a runtime (a claimed job adds its status and lockUntil).
AI_POLL_ITEM = AI_JOB.only(
    "AiPollItem", "id", "jobType", "targetType", "targetId", "snapshotId", "params", "priority",
    "attemptNo", "apiKeyMode", "modelProvider", "modelName", "promptVersion",
    "outputSchemaVersion", "timeoutSeconds", "createdAt",
)
AI_CLAIMED_ITEM = AI_JOB.only("AiClaimedItem", *(f.name for f in AI_POLL_ITEM.fields),
                              "status", "lockUntil")
AI_RESULT = Shape(
    "AiResult", id=STR, jobId=STR, attemptNo=INT, runtimeInstanceId=STR, status=STR,
    output=ANY, outputHash=NULL_STR, errorCode=NULL_STR, errorMessage=NULL_STR, createdAt=TIME,
)
AI_SNAPSHOT = Shape("AiSnapshot", id=STR, userId=STR, targetType=STR, targetId=STR,
                    data=OBJECT, createdAt=TIME)
AI_CREDENTIAL = Shape("AiCredential", id=STR, userId=STR, provider=STR, keyHint=NULL_STR,
                      createdAt=TIME, revokedAt=TIME)
# A failed job in the queue's stats (``GET /api/ai/stats``).
AI_FAILURE = Shape("AiFailure", id=STR, jobType=STR, errorCode=NULL_STR, errorMessage=NULL_STR,
                   finishedAt=TIME, attemptNo=INT, retryCount=INT, rerunJobId=NULL_STR)
