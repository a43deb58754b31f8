"""The worker loop. One thread polls; each job runs in a pool thread with a
heartbeat thread beside it. A heartbeat answered CANCEL_REQUESTED or LOCK_LOST
stops the job: nothing more is submitted for that attempt.

``stop()`` (SIGTERM) drains: no new polls, running jobs finish and report.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from services.ai_jobs.domain import JOB_TYPES
from services.ai_jobs.schemas import known_version, schema_errors
from services.ai_runtime.client import ProtocolError, RuntimeClient
from services.ai_runtime.prompts import UnknownPrompt, build_messages
from services.ai_runtime.providers import ProviderError

log = logging.getLogger(__name__)

HEARTBEAT_FRACTION = 1 / 3  # of the lease: two heartbeats may be lost before it runs out


class JobStopped(Exception):
    """The job's lease is gone or it was cancelled: drop the work."""


class RuntimeWorker:
    def __init__(self, client: RuntimeClient, providers: dict, *, capabilities=JOB_TYPES,
                 concurrency: int = 1, poll_interval: float = 2.0, claim: bool = False,
                 default_provider: str | None = None):
        """``providers``: model provider name → provider. ``default_provider``
        (one of them) stands in for every provider the runtime lacks: a demo
        or test runtime answering all jobs with the offline model."""
        self.client = client
        self.providers = providers
        if default_provider is not None and default_provider not in providers:
            raise ValueError(f"default_provider {default_provider!r} is not one of {sorted(providers)}")
        self.default_provider = default_provider
        self.serves = self._serves()
        if not self.serves:
            raise ValueError("this runtime can serve no job: no provider can be used")
        self.capabilities = list(capabilities)
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.claim = claim
        self._stopping = threading.Event()
        self._slots = threading.BoundedSemaphore(concurrency)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ai-job")
        self.outcomes: list[tuple[str, int, str]] = []  # (jobId, attemptNo, outcome), for logs and tests

    def _serves(self) -> list[dict]:
        """What this runtime can serve, sent with every poll: the server hands out
        only such jobs, so a job is never taken by a runtime that would have to
        fail it for a missing key or provider."""
        if self.default_provider is not None:
            stand_in = self.providers[self.default_provider]
            return [{"modelProvider": "*", "apiKeyModes": list(stand_in.api_key_modes)}]
        return [{"modelProvider": name, "apiKeyModes": list(p.api_key_modes)}
                for name, p in sorted(self.providers.items()) if p.api_key_modes]

    # -- loop ---------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        log.info("runtime %s polling for %s", self.client.runtime_id, ", ".join(self.capabilities))
        while not self._stopping.is_set():
            free = self._free_slots()
            got = 0
            if free:
                try:
                    got = self._poll_once(free)
                except ProtocolError as exc:
                    log.warning("poll failed: %s", exc)
            if not got:
                self._stopping.wait(self.poll_interval)
        self._pool.shutdown(wait=True)  # drain
        log.info("runtime %s stopped", self.client.runtime_id)

    def _free_slots(self) -> int:
        free = 0
        while free < self.concurrency and self._slots.acquire(blocking=False):
            free += 1
        for _ in range(free):
            self._slots.release()
        return free

    def _poll_once(self, free: int) -> int:
        if self.claim:
            jobs = self.client.poll(self.capabilities, limit=min(free, 50), claim=True, serves=self.serves)
        else:
            # The page's first job is offered to this runtime alone for a moment
            # (other runtimes' polls skip it): lock in the order given. The rest
            # may be others' too, so ask for about what we can take: a page a
            # little wider than our free slots leaves room for a lost lock or two.
            jobs = self.client.poll(self.capabilities, limit=min(free + 2, 50), serves=self.serves)
        started = 0
        for job in jobs:
            if self._stopping.is_set() or started >= free:
                break
            if not self.claim:
                try:
                    lease = self.client.lock(job["id"])
                except ProtocolError as exc:
                    if exc.code in ("JOB_ALREADY_LOCKED", "NOT_FOUND"):
                        continue  # another runtime was faster
                    raise
                job = {**job, "attemptNo": lease["attemptNo"], "lockUntil": lease["lockUntil"]}
            self._slots.acquire()
            self._pool.submit(self._run_job, job)
            started += 1
        return started

    # -- one job -------------------------------------------------------------------

    def _run_job(self, job: dict) -> None:
        stopped = threading.Event()
        beat = threading.Thread(target=self._heartbeats, args=(job, stopped), daemon=True)
        try:
            self.client.heartbeat(job["id"], job["attemptNo"])  # locked → running
            beat.start()
            outcome = self._execute(job, stopped)
        except ProtocolError as exc:
            outcome = f"stopped:{exc.code}"
        except JobStopped as exc:
            outcome = f"stopped:{exc}"
        except Exception:  # noqa: BLE001 - a bug in one job must not kill the worker
            log.exception("job %s crashed", job["id"])
            outcome = "crashed"
        finally:
            stopped.set()
            self._slots.release()
        self.outcomes.append((job["id"], job["attemptNo"], outcome))
        log.info("job %s attempt %s: %s", job["id"], job["attemptNo"], outcome)

    def _heartbeats(self, job: dict, stopped: threading.Event) -> None:
        interval = max(self._lease_seconds(job) * HEARTBEAT_FRACTION, 0.05)
        while not stopped.wait(interval):
            try:
                self.client.heartbeat(job["id"], job["attemptNo"])
            except ProtocolError as exc:
                if exc.code in ("CANCEL_REQUESTED", "LOCK_LOST", "NOT_FOUND"):
                    log.info("job %s: %s; dropping it", job["id"], exc.code)
                    job["_stop_reason"] = exc.code
                    stopped.set()
                    return
                log.warning("heartbeat for %s failed: %s", job["id"], exc)

    @staticmethod
    def _lease_seconds(job: dict) -> float:
        until = job.get("lockUntil")
        if not until:
            return 30.0
        end = datetime.fromisoformat(until.replace("Z", "+00:00"))
        return max((end - datetime.now(UTC)).total_seconds(), 0.3)

    def _check(self, job: dict, stopped: threading.Event) -> None:
        if stopped.is_set():
            raise JobStopped(job.get("_stop_reason", "stopped"))

    def _execute(self, job: dict, stopped: threading.Event) -> str:
        job_id, attempt = job["id"], job["attemptNo"]
        try:
            snapshot = self.client.snapshot(job["snapshotId"], job_id) if job.get("snapshotId") else None
            if not known_version(job["jobType"], job.get("outputSchemaVersion") or "1"):
                raise ProviderError("INVALID_SCHEMA", f"unknown outputSchemaVersion {job.get('outputSchemaVersion')}")
            try:
                messages = build_messages(job, snapshot)
            except UnknownPrompt as exc:
                raise ProviderError("INVALID_SNAPSHOT", str(exc)) from None
            api_key = None
            if job.get("apiKeyMode") == "user_deepseek_key":
                try:
                    api_key = self.client.credential(job_id, attempt)["apiKey"]
                except ProtocolError as exc:
                    if exc.code in ("FORBIDDEN", "NOT_FOUND"):
                        raise ProviderError("INVALID_CREDENTIAL", exc.message) from None
                    raise
            provider = self.providers.get(job.get("modelProvider")) or self.providers.get(self.default_provider)
            if provider is None or job.get("apiKeyMode") not in provider.api_key_modes:
                # The poll filters these out; an older server may not: never burn
                # the user's job for our own configuration, retry it elsewhere.
                raise ProviderError("TEMPORARY_PROVIDER_ERROR",
                                    f"this runtime cannot serve {job.get('modelProvider')}/{job.get('apiKeyMode')}")
            self._check(job, stopped)
            output = provider.complete(job, snapshot, messages, api_key=api_key,
                                       timeout=job.get("timeoutSeconds"))
            self._check(job, stopped)
            violations = schema_errors(job["jobType"], job.get("outputSchemaVersion"), output)
            if violations:
                raise ProviderError("INVALID_SCHEMA", "; ".join(violations))
        except ProviderError as exc:
            self._check(job, stopped)
            self.client.fail(job_id, attempt, exc.code, exc.message)
            return f"failed:{exc.code}"
        stopped.set()  # no heartbeat may race the result
        self.client.succeed(job_id, attempt, output)
        return "succeeded"


def run_until_signalled(worker: RuntimeWorker) -> int:
    """Run in the foreground; SIGTERM/SIGINT drain and exit 0."""
    import signal

    def drain(signum, _frame):
        log.info("signal %s: draining", signum)
        worker.stop()

    signal.signal(signal.SIGTERM, drain)
    signal.signal(signal.SIGINT, drain)
    started = time.monotonic()
    worker.run()
    log.info("ran %.0f s, %d job attempts", time.monotonic() - started, len(worker.outcomes))
    return 0
