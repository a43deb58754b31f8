"""``/api/admin/*`` (role ``admin``)."""

from __future__ import annotations

from gateway.api.ai_common import NoteIn, ai_queue
from gateway.api.blueprint import Blueprint
from gateway.auth import require

blp = Blueprint("admin", __name__, url_prefix="/api/admin", description="administration")


@blp.route("/ai/jobs/<job_id>/rerun", methods=["POST"])
@require("admin")
@blp.arguments(NoteIn, required=False)
def rerun_ai_job(_body, job_id):
    """A failed AI job → a new pending job with ``retriedFromJobId`` (201); asked
    again, the rerun it already has (200): a double click makes one job."""
    job, created = ai_queue().rerun_job(job_id)
    return job, 201 if created else 200
