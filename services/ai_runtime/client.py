"""The runtime protocol over HTTP (``/internal/runtime/*``) with requests."""

from __future__ import annotations

import requests

from services.ai_jobs.domain import output_hash


class ProtocolError(Exception):
    """The gateway refused: ``status`` and the envelope's ``code``."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class RuntimeClient:
    def __init__(self, base_url: str, token: str, runtime_id: str, timeout: float = 30.0):
        self.base = base_url.rstrip("/") + "/internal/runtime"
        self.runtime_id = runtime_id
        self.timeout = timeout
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"

    def _call(self, method: str, path: str, *, json=None, params=None):
        try:
            r = self.http.request(method, self.base + path, json=json, params=params, timeout=self.timeout)
        except requests.RequestException as exc:
            raise ProtocolError(0, "UNAVAILABLE", f"gateway unreachable: {exc.__class__.__name__}") from None
        if r.status_code == 204:
            return None
        try:
            body = r.json()
        except ValueError:
            body = {}
        if r.status_code >= 400:
            err = body.get("error", {}) if isinstance(body, dict) else {}
            raise ProtocolError(r.status_code, err.get("code", "ERROR"), err.get("message", r.reason))
        return body

    def poll(self, capabilities, limit: int = 20, claim: bool = False, serves=None) -> list[dict]:
        """``serves``: ``[{"modelProvider", "apiKeyModes"}]`` this runtime can serve
        (only those jobs come back); None: any job of these types (seed 000)."""
        body = {"runtimeInstanceId": self.runtime_id, "capabilities": list(capabilities), "limit": limit,
                "claim": claim}
        if serves:
            body["serves"] = serves
        return self._call("POST", "/jobs/poll", json=body)["jobs"]

    def lock(self, job_id: str) -> dict:
        return self._call("POST", f"/jobs/{job_id}/lock", json={"runtimeInstanceId": self.runtime_id})

    def heartbeat(self, job_id: str, attempt_no: int) -> None:
        self._call("POST", f"/jobs/{job_id}/heartbeat",
                   json={"runtimeInstanceId": self.runtime_id, "attemptNo": attempt_no})

    def snapshot(self, snapshot_id: str, job_id: str) -> dict:
        return self._call("GET", f"/snapshots/{snapshot_id}",
                          params={"runtimeInstanceId": self.runtime_id, "jobId": job_id})

    def credential(self, job_id: str, attempt_no: int) -> dict:
        return self._call("GET", f"/jobs/{job_id}/credential",
                          params={"runtimeInstanceId": self.runtime_id, "attemptNo": attempt_no})

    def succeed(self, job_id: str, attempt_no: int, output) -> dict:
        return self._call("POST", f"/jobs/{job_id}/result", json={
            "runtimeInstanceId": self.runtime_id, "attemptNo": attempt_no, "status": "succeeded",
            "output": output, "outputHash": output_hash(output)})

    def fail(self, job_id: str, attempt_no: int, code: str, message: str) -> dict:
        return self._call("POST", f"/jobs/{job_id}/result", json={
            "runtimeInstanceId": self.runtime_id, "attemptNo": attempt_no, "status": "failed",
            "errorCode": code, "errorMessage": message[:2000]})
