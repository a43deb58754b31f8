"""Output JSON Schemas per job type, versioned by ``outputSchemaVersion``.

Each schema requires at least what the contract names and allows more fields.
Version ``"1"`` is the only one so far; a job created without a version gets
``DEFAULT_VERSION``.
"""

from __future__ import annotations

from jsonschema import Draft202012Validator

DEFAULT_VERSION = "1"

_UNIT = {"type": "number", "minimum": 0, "maximum": 1}
_TEXT = {"type": "string", "minLength": 1}


def _array_of(properties: dict, required: list[str]) -> dict:
    return {
        "type": "array",
        "items": {"type": "object", "properties": properties, "required": required},
    }


SCHEMAS: dict[str, dict[str, dict]] = {
    "learning_state_analysis": {
        "1": {
            "type": "object",
            "properties": {
                "summary": _TEXT,
                "masteryLevel": _UNIT,
                "strengths": {"type": "array", "items": {"type": "string"}},
                "risks": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["summary", "masteryLevel"],
        }
    },
    "weak_point_analysis": {
        "1": _array_of(
            {
                "knowledgePointId": {"type": ["string", "integer"]},
                "reason": _TEXT,
                "confidence": _UNIT,
            },
            ["knowledgePointId", "reason", "confidence"],
        )
    },
    "next_action_planning": {
        "1": _array_of(
            {"actionType": {"type": "string", "minLength": 1}, "title": _TEXT, "detail": {"type": "string"}},
            ["actionType", "title"],
        )
    },
    "quiz_generation": {
        "1": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "question": _TEXT,
                    "options": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                    "answerIndex": {"type": "integer", "minimum": 0},
                    "explanation": {"type": "string"},
                },
                "required": ["question", "options", "answerIndex"],
            },
        }
    },
    "flashcard_generation": {
        "1": _array_of({"front": _TEXT, "back": _TEXT}, ["front", "back"]),
    },
}

_VALIDATORS = {
    (job_type, version): Draft202012Validator(schema)
    for job_type, versions in SCHEMAS.items()
    for version, schema in versions.items()
}


def schema_for(job_type: str, version: str | None = None) -> dict | None:
    schema = SCHEMAS.get(job_type, {}).get(version or DEFAULT_VERSION)
    if schema is None:
        return None
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"{job_type} output v{version or DEFAULT_VERSION}", **schema}


def known_version(job_type: str, version: str) -> bool:
    return (job_type, version) in _VALIDATORS


def schema_errors(job_type: str, version: str | None, output) -> list[str]:
    """Human-readable violations of the job type's schema (empty: valid)."""
    validator = _VALIDATORS[(job_type, version or DEFAULT_VERSION)]
    errors = []
    for err in sorted(validator.iter_errors(output), key=lambda e: list(e.path))[:5]:
        where = "/".join(str(p) for p in err.path) or "(root)"
        errors.append(f"{where}: {err.message}")
    # answerIndex must point into options: beyond what a schema can say.
    if job_type == "quiz_generation" and not errors:
        for i, q in enumerate(output):
            if q["answerIndex"] >= len(q["options"]):
                errors.append(f"{i}/answerIndex: {q['answerIndex']} is not an index into options")
    return errors
