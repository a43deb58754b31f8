"""Jobs (suspend / resume / rework) and the tasks the loop gave the hardware."""

from __future__ import annotations

from sqlalchemy import or_, select

from gateway import schemas
from gateway.api.blueprint import Blueprint
from gateway.api.common import (
    COMMAND_ERRORS,
    QUERY_ERRORS,
    check_id,
    document_errors,
    get_or_404,
    page,
    parse_statuses,
    read_session,
    reply,
    run_command,
)
from gateway.auth import require
from gateway.errors import ApiError
from shared import serialize
from shared.db.models import JOB_STATUSES, TASK_STATUSES, Job, Task, WorkOrder

blp = Blueprint("jobs", __name__, description="jobs (workpieces) and tasks")


@blp.route("/api/jobs", methods=["GET"])
@require("operator")
@blp.arguments(schemas.JobListArgsSchema, location="query")
@blp.response(200, schemas.page_of(schemas.JobSchema))
@document_errors(blp, *QUERY_ERRORS)
def list_jobs(args):
    filters = []
    statuses = parse_statuses(args.get("status"), JOB_STATUSES)
    if statuses:
        filters.append(Job.status.in_(statuses))
    if "workOrderId" in args:
        filters.append(Job.work_order_id == args["workOrderId"])
    return page(Job, Job.id, args, serialize.job, *filters)


@blp.route("/api/jobs/<int:job_id>", methods=["GET"])
@require("operator")
@blp.response(200, schemas.JobSchema)
@document_errors(blp, 401, 403, 404)
def get_job(job_id):
    return get_or_404(Job, job_id, "job", serialize.job)


@blp.route("/api/jobs/<int:job_id>/route", methods=["GET"])
@require("operator")
@blp.response(200, schemas.JobRouteSchema)
@document_errors(blp, 401, 403, 404)
def get_job_route(job_id):
    """The job's route, each step with its state, its times and the tasks that served it."""
    check_id(job_id, "job")
    with read_session() as session:
        job = session.execute(select(Job.__table__).where(Job.id == job_id)).first()
        if job is None:
            raise ApiError(404, "NOT_FOUND", f"job {job_id} not found")
        route = session.execute(select(WorkOrder.route).where(WorkOrder.id == job.work_order_id)).scalar()
        tasks = session.execute(
            select(Task.__table__).where(or_(Task.job_id == job_id,
                                             Task.params["jobIds"].contains([job_id])))
            .order_by(Task.id)).all()
    return reply(serialize.job_route(job, route or [], tasks))


@blp.route("/api/jobs/<int:job_id>/suspend", methods=["POST"])
@require("operator")
@blp.arguments(schemas.NoteSchema, required=False)
@blp.response(200, schemas.JobSchema)
@blp.alt_response(202, schema=schemas.AcceptedSchema, description="the loop did not answer in time")
@document_errors(blp, *COMMAND_ERRORS)
def suspend_job(body, job_id):
    return run_command("SuspendJob", {"jobId": check_id(job_id, "job"), **(body or {})})


@blp.route("/api/jobs/<int:job_id>/resume", methods=["POST"])
@require("operator")
@blp.arguments(schemas.NoteSchema, required=False)
@blp.response(200, schemas.JobSchema)
@blp.alt_response(202, schema=schemas.AcceptedSchema, description="the loop did not answer in time")
@document_errors(blp, *COMMAND_ERRORS)
def resume_job(body, job_id):
    return run_command("ResumeJob", {"jobId": check_id(job_id, "job"), **(body or {})})


@blp.route("/api/jobs/<int:job_id>/rework", methods=["POST"])
@require("operator")
@blp.arguments(schemas.ReworkSchema, required=False)
@blp.response(200, schemas.JobSchema)
@blp.alt_response(202, schema=schemas.AcceptedSchema, description="the loop did not answer in time")
@document_errors(blp, *COMMAND_ERRORS)
def rework_job(body, job_id):
    return run_command("ReworkJob", {"jobId": check_id(job_id, "job"), **(body or {})})


@blp.route("/api/tasks", methods=["GET"])
@require("operator")
@blp.arguments(schemas.JobListArgsSchema, location="query")
@blp.response(200, schemas.page_of(schemas.TaskSchema))
@document_errors(blp, *QUERY_ERRORS)
def list_tasks(args):
    filters = []
    statuses = parse_statuses(args.get("status"), TASK_STATUSES)
    if statuses:
        filters.append(Task.status.in_(statuses))
    if "workOrderId" in args:
        filters.append(Task.work_order_id == args["workOrderId"])
    return page(Task, Task.id, args, serialize.task, *filters)
