"""Prompts per job type and ``promptVersion``. The model is asked for one
JSON object; list outputs come wrapped as ``{"items": [...]}``."""

from __future__ import annotations

import json

from services.ai_jobs.schemas import schema_for

LIST_TYPES = ("weak_point_analysis", "next_action_planning", "quiz_generation", "flashcard_generation")

_TASKS_V1 = {
    "learning_state_analysis": "Assess the learner's current state: a short summary and a masteryLevel in 0..1.",
    "weak_point_analysis": "Find the learner's weak knowledge points, each with a reason and a confidence in 0..1.",
    "next_action_planning": "Recommend the learner's next actions, each with an actionType and a title.",
    "quiz_generation": "Write multiple-choice quiz questions with options and the index of the right answer.",
    "flashcard_generation": "Write flashcards, each with a front (prompt) and a back (answer).",
}

PROMPTS = {"v1": _TASKS_V1}


class UnknownPrompt(ValueError):
    pass


def build_messages(job: dict, snapshot: dict | None) -> list[dict]:
    version = job.get("promptVersion") or "v1"
    tasks = PROMPTS.get(version)
    if tasks is None:
        raise UnknownPrompt(f"no prompt version {version!r}")
    job_type = job["jobType"]
    schema = schema_for(job_type, job.get("outputSchemaVersion"))
    if job_type in LIST_TYPES:
        shape = ('Answer with one JSON object {"items": [...]} whose items follow this JSON Schema: '
                 + json.dumps(schema["items"], sort_keys=True))
    else:
        shape = "Answer with one JSON object following this JSON Schema: " + json.dumps(schema, sort_keys=True)
    system = (f"You are a learning analyst. {tasks[job_type]} {shape} "
              "Use only the data given. Output JSON only, no prose.")
    user = json.dumps({"target": {"type": job["targetType"], "id": job["targetId"]},
                       "params": job.get("params") or {},
                       "snapshot": (snapshot or {}).get("data")}, ensure_ascii=False, sort_keys=True)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def unwrap(job_type: str, answer):
    """The model's object → the job's output (lists come as ``{"items": [...]}``)."""
    if job_type in LIST_TYPES and isinstance(answer, dict) and "items" in answer:
        return answer["items"]
    return answer
