"""Work orders: create / start / pause / resume / cancel (commands to the loop)
and queries (read-only DB)."""

from __future__ import annotations

from gateway import schemas
from gateway.api.blueprint import LineBlueprint
from gateway.api.common import (
    COMMAND_ERRORS,
    check_id,
    command_view,
    document_errors,
    get_or_404,
    idempotent_command_id,
    page,
    query_view,
    run_command,
    status_filter,
)
from gateway.auth import require
from gateway.context import current_line
from gateway.errors import ApiError
from shared import serialize
from shared.db.models import WORK_ORDER_STATUSES, WorkOrder

blp = LineBlueprint("orders", __name__, description="work orders")

ORDER_COMMANDS = {"start": "StartOrder", "pause": "PauseOrder", "resume": "ResumeOrder",
                  "cancel": "CancelOrder"}


@blp.route("/work-orders", methods=["POST"])
@require("operator")
@blp.arguments(schemas.CreateOrderSchema)
@blp.response(201, schemas.WorkOrderSchema)
@blp.alt_response(200, schema=schemas.WorkOrderSchema, description="a repeat of an Idempotency-Key")
@blp.alt_response(202, schema=schemas.AcceptedSchema, description="the loop did not answer in time")
@document_errors(blp, *COMMAND_ERRORS)
def create_order(body):
    """Create a work order. With an ``Idempotency-Key`` header a repeat of the same
    body answers 200 with the same order; the key with another body is 409
    ``IDEMPOTENCY_KEY_REUSED``."""
    command_id = idempotent_command_id()
    layout = current_line().layout
    if body["productId"] not in {p.id for p in layout.products}:
        raise ApiError(400, "VALIDATION_ERROR", f"productId: unknown product {body['productId']!r}")
    return run_command("CreateOrder", body, ok_status=201, command_id=command_id)


@query_view(blp, "/work-orders", schemas.OrderListArgsSchema, schemas.page_of(schemas.WorkOrderSchema))
def list_orders(args):
    filters = status_filter(WorkOrder.status, args.get("status"), WORK_ORDER_STATUSES)
    return page(WorkOrder, WorkOrder.id, args, serialize.work_order, *filters)


@query_view(blp, "/work-orders/<int:order_id>", None, schemas.WorkOrderSchema, 401, 403, 404)
def get_order(order_id):
    return get_or_404(WorkOrder, order_id, "work order", serialize.work_order)


def _order_command(action: str):
    def view(body, order_id):
        payload = {"workOrderId": check_id(order_id, "work order"), **(body or {})}
        return run_command(ORDER_COMMANDS[action], payload)

    view.__name__ = f"{action}_order"
    view.__doc__ = f"{ORDER_COMMANDS[action]}: {action} a work order."
    command_view(blp, f"/work-orders/<int:order_id>/{action}", schemas.NoteSchema, schemas.WorkOrderSchema,
                 required=False)(view)


for _action in ORDER_COMMANDS:
    _order_command(_action)
