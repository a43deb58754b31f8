"""Model providers. Each turns (job, snapshot, messages) into the job's output
or raises :class:`ProviderError` with one of the seed's error codes."""

from __future__ import annotations

import hashlib
import json

import requests

from services.ai_jobs.domain import canonical_json
from services.ai_runtime.prompts import unwrap


class ProviderError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


API_KEY_MODES = ("platform_key", "user_deepseek_key")


class OfflineProvider:
    """Deterministic, schema-valid outputs derived from the snapshot (demos, tests).
    It needs no key, so it can serve any job (and stands in for any provider)."""

    name = "offline"
    api_key_modes = API_KEY_MODES

    def complete(self, job: dict, snapshot: dict | None, messages, api_key=None, timeout=None):
        data = (snapshot or {}).get("data") or {}
        digest = hashlib.sha256(canonical_json({"job": job["jobType"], "target": job["targetId"],
                                                "data": data})).digest()
        level = round(digest[0] / 255, 3)
        topics = [str(t) for t in data.get("topics", [])] or [str(job["targetId"])]
        count = max(1, min(int((job.get("params") or {}).get("count", 3)), 20))
        job_type = job["jobType"]
        if job_type == "learning_state_analysis":
            return {"summary": f"{len(topics)} topic(s) reviewed; mastery {level:.0%}",
                    "masteryLevel": level, "strengths": topics[:1], "risks": topics[1:2]}
        if job_type == "weak_point_analysis":
            return [{"knowledgePointId": t, "reason": f"low recent accuracy on {t}",
                     "confidence": round((digest[i % 32]) / 255, 3)} for i, t in enumerate(topics)]
        if job_type == "next_action_planning":
            return [{"actionType": "review", "title": f"Review {t}"} for t in topics[:count]]
        if job_type == "quiz_generation":
            return [{"question": f"Which statement about {topics[i % len(topics)]} is true? (#{i + 1})",
                     "options": ["A", "B", "C", "D"], "answerIndex": digest[i] % 4} for i in range(count)]
        if job_type == "flashcard_generation":
            return [{"front": f"{topics[i % len(topics)]} (#{i + 1})", "back": f"Key idea of {topics[i % len(topics)]}"}
                    for i in range(count)]
        raise ProviderError("INVALID_SNAPSHOT", f"unknown job type {job_type}")


class DeepSeekProvider:
    """DeepSeek's OpenAI-compatible chat completions (``POST {base}/chat/completions``)."""

    name = "deepseek"

    def __init__(self, base_url: str = "https://api.deepseek.com", api_key: str | None = None,
                 timeout: float = 60.0):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.http = requests.Session()

    @property
    def api_key_modes(self) -> tuple[str, ...]:
        """A user's own key always comes with the job; the platform key only if configured."""
        return API_KEY_MODES if self.api_key else ("user_deepseek_key",)

    def complete(self, job: dict, snapshot, messages, api_key=None, timeout=None):
        key = api_key or self.api_key
        if not key:
            raise ProviderError("INVALID_CREDENTIAL", "no API key for the deepseek provider")
        try:
            r = self.http.post(
                f"{self.base_url}/chat/completions",
                headers={"Authorization": f"Bearer {key}"},
                json={"model": job.get("modelName") or "deepseek-chat", "messages": messages,
                      "response_format": {"type": "json_object"}, "temperature": 0.2, "stream": False},
                timeout=min(timeout or self.timeout, self.timeout),
            )
        except requests.Timeout:
            raise ProviderError("MODEL_TIMEOUT", "the model did not answer in time") from None
        except requests.RequestException as exc:
            raise ProviderError("NETWORK_ERROR", f"{exc.__class__.__name__} talking to the provider") from None
        if r.status_code == 429:
            raise ProviderError("MODEL_RATE_LIMIT", "the provider is rate limiting")
        if r.status_code in (401, 403):
            raise ProviderError("INVALID_CREDENTIAL", f"the provider refused the key ({r.status_code})")
        if r.status_code >= 500:
            raise ProviderError("TEMPORARY_PROVIDER_ERROR", f"provider error {r.status_code}")
        if r.status_code >= 400:
            raise ProviderError("INVALID_SNAPSHOT", f"the provider rejected the request ({r.status_code})")
        try:
            content = r.json()["choices"][0]["message"]["content"]
            return unwrap(job["jobType"], json.loads(content))
        except (ValueError, KeyError, IndexError, TypeError):
            raise ProviderError("INVALID_SCHEMA", "the model's answer is not the JSON asked for") from None
