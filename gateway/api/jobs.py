"""Jobs (suspend / resume / rework) and the tasks the loop gave the hardware."""

from __future__ import annotations

from sqlalchemy import or_, select

from gateway import schemas
from gateway.api.blueprint import LineBlueprint
from gateway.api.common import (
    check_id,
    command_view,
    get_or_404,
    of_line,
    page,
    query_view,
    read_session,
    reply,
    run_command,
    status_filter,
)
from gateway.errors import ApiError
from shared import serialize
from shared.db.models import JOB_STATUSES, TASK_STATUSES, Job, Task, WorkOrder

blp = LineBlueprint("jobs", __name__, description="jobs (workpieces) and tasks")


def _page_by_order(model, args: dict, statuses: tuple[str, ...], serializer) -> dict:
    """Jobs or tasks, optionally of some statuses and of one work order."""
    filters = status_filter(model.status, args.get("status"), statuses)
    if "workOrderId" in args:
        filters.append(model.work_order_id == args["workOrderId"])
    return page(model, model.id, args, serializer, *filters)


@query_view(blp, "/jobs", schemas.JobListArgsSchema, schemas.page_of(schemas.JobSchema))
def list_jobs(args):
    return _page_by_order(Job, args, JOB_STATUSES, serialize.job)


@query_view(blp, "/jobs/<int:job_id>", None, schemas.JobSchema, 401, 403, 404)
def get_job(job_id):
    return get_or_404(Job, job_id, "job", serialize.job)


@query_view(blp, "/jobs/<int:job_id>/route", None, schemas.JobRouteSchema, 401, 403, 404)
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
    return reply(of_line(serialize.job_route(job, route or [], tasks)))


@command_view(blp, "/jobs/<int:job_id>/suspend", schemas.NoteSchema, schemas.JobSchema, required=False)
def suspend_job(body, job_id):
    return run_command("SuspendJob", {"jobId": check_id(job_id, "job"), **(body or {})})


@command_view(blp, "/jobs/<int:job_id>/resume", schemas.NoteSchema, schemas.JobSchema, required=False)
def resume_job(body, job_id):
    return run_command("ResumeJob", {"jobId": check_id(job_id, "job"), **(body or {})})


@command_view(blp, "/jobs/<int:job_id>/rework", schemas.ReworkSchema, schemas.JobSchema, required=False)
def rework_job(body, job_id):
    return run_command("ReworkJob", {"jobId": check_id(job_id, "job"), **(body or {})})


@query_view(blp, "/tasks", schemas.JobListArgsSchema, schemas.page_of(schemas.TaskSchema))
def list_tasks(args):
    return _page_by_order(Task, args, TASK_STATUSES, serialize.task)
