"""The line as laid out (``/api/line``, ``/api/products``) and its live state
(``/api/equipment``, ``/api/buffer``), and command outcomes."""

from __future__ import annotations

from sqlalchemy import select

from gateway import schemas
from gateway.api.blueprint import Blueprint
from gateway.api.common import document_errors, get_or_404, read_session, reply
from gateway.auth import require
from gateway.context import gateway_context
from shared import serialize
from shared.db.models import JOB_TERMINAL, Equipment, EquipmentSlot, Job, LoopMessage

blp = Blueprint("line", __name__, description="the line: layout, equipment, buffer")


@blp.route("/api/line", methods=["GET"])
@require("operator")
@blp.response(200, schemas.LineSchema)
@document_errors(blp, 401, 403)
def get_line():
    return gateway_context().line_layout().to_json()


@blp.route("/api/products", methods=["GET"])
@require("operator")
@blp.response(200, schemas.ProductListSchema)
@document_errors(blp, 401, 403)
def list_products():
    return {"items": gateway_context().line_layout().products_json()}


@blp.route("/api/equipment", methods=["GET"])
@require("operator")
@blp.response(200, schemas.EquipmentListSchema)
@document_errors(blp, 401, 403)
def list_equipment():
    with read_session() as session:
        equipment = session.execute(select(Equipment.__table__).order_by(Equipment.id)).all()
        slots: dict[str, list] = {}
        for s in session.execute(select(EquipmentSlot.__table__)):
            slots.setdefault(s.equipment_id, []).append(s)
    return reply({"items": [serialize.equipment(e, slots.get(e.id, [])) for e in equipment]})


@blp.route("/api/buffer", methods=["GET"])
@require("operator")
@blp.response(200, schemas.BufferSchema)
@document_errors(blp, 401, 403)
def get_buffer():
    """The buffer slots: a live job with ``temp_slot_no`` holds that slot."""
    size = gateway_context().line_layout().buffer_slots
    stmt = select(Job.temp_slot_no, Job.id).where(
        Job.temp_slot_no.is_not(None), Job.status.not_in(JOB_TERMINAL)
    ).order_by(Job.id)
    with read_session() as session:
        held = {slot_no: job_id for slot_no, job_id in session.execute(stmt)}
    return reply({"slots": [{"slotNo": n, "jobId": held.get(n)} for n in range(1, size + 1)]})


@blp.route("/api/commands/<command_id>", methods=["GET"])
@require("operator")
@blp.response(200, schemas.CommandOutcomeSchema)
@document_errors(blp, 401, 403, 404)
def get_command(command_id):
    return get_or_404(LoopMessage, command_id[:64], "command", serialize.loop_message)
