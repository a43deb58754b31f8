"""A line as laid out (``/line``, ``/products``) and its live state
(``/equipment``, ``/buffer``), and command outcomes; under ``/api`` (the
default line) and ``/api/lines/{lineId}``."""

from __future__ import annotations

from sqlalchemy import select

from gateway import schemas
from gateway.api.blueprint import LineBlueprint
from gateway.api.common import document_errors, get_or_404, of_line, read_session, reply
from gateway.auth import require
from gateway.context import current_line
from shared import serialize
from shared.db.models import JOB_TERMINAL, Equipment, EquipmentSlot, Job, LoopMessage

blp = LineBlueprint("line", __name__, description="the line: layout, equipment, buffer")


@blp.route("/line", methods=["GET"])
@require("operator")
@blp.response(200, schemas.LineSchema)
@document_errors(blp, 401, 403)
def get_line():
    return current_line().layout.to_json()


@blp.route("/products", methods=["GET"])
@require("operator")
@blp.response(200, schemas.ProductListSchema)
@document_errors(blp, 401, 403)
def list_products():
    return {"items": current_line().layout.products_json()}


@blp.route("/equipment", methods=["GET"])
@require("operator")
@blp.response(200, schemas.EquipmentListSchema)
@document_errors(blp, 401, 403)
def list_equipment():
    with read_session() as session:
        equipment = session.execute(select(Equipment.__table__).order_by(Equipment.id)).all()
        slots: dict[str, list] = {}
        for s in session.execute(select(EquipmentSlot.__table__)):
            slots.setdefault(s.equipment_id, []).append(s)
    return reply({"items": [of_line(serialize.equipment(e, slots.get(e.id, []))) for e in equipment]})


@blp.route("/buffer", methods=["GET"])
@require("operator")
@blp.response(200, schemas.BufferSchema)
@document_errors(blp, 401, 403)
def get_buffer():
    """The buffer slots: a live job with ``temp_slot_no`` holds that slot."""
    size = current_line().layout.buffer_slots
    stmt = select(Job.temp_slot_no, Job.id).where(
        Job.temp_slot_no.is_not(None), Job.status.not_in(JOB_TERMINAL)
    ).order_by(Job.id)
    with read_session() as session:
        held = {slot_no: job_id for slot_no, job_id in session.execute(stmt)}
    return reply({"slots": [{"slotNo": n, "jobId": held.get(n)} for n in range(1, size + 1)]})


@blp.route("/commands/<command_id>", methods=["GET"])
@require("operator")
@blp.response(200, schemas.CommandOutcomeSchema)
@document_errors(blp, 401, 403, 404)
def get_command(command_id):
    return get_or_404(LoopMessage, command_id[:64], "command", serialize.loop_message)
