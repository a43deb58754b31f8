"""The reference runtime against the real gateway (over HTTP) and service,
with the offline provider and with DeepSeek's API played by a local fake."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
from werkzeug.serving import make_server

from services.ai_jobs.domain import JOB_TYPES
from services.ai_jobs.schemas import schema_errors
from services.ai_runtime.client import RuntimeClient
from services.ai_runtime.providers import DeepSeekProvider, OfflineProvider
from services.ai_runtime.worker import RuntimeWorker
from tests.ai.conftest import TOKENS, Api
from tests.ai.fake_deepseek import FakeDeepSeek
from tests.support.waiting import wait_for

RUNTIME_TOKEN = "runtime-token-00001"


@pytest.fixture
def http_gateway(gateway):
    server = make_server("127.0.0.1", 0, gateway, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.fixture
def fake():
    f = FakeDeepSeek()
    yield f
    f.close()


@pytest.fixture
def run_worker():
    started = []

    def run(url, providers, rid="worker-1", **kw):
        kw.setdefault("poll_interval", 0.05)
        worker = RuntimeWorker(RuntimeClient(url, RUNTIME_TOKEN, rid, timeout=30), providers, **kw)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        started.append((worker, thread))
        return worker

    yield run
    for worker, thread in started:
        worker.stop()
        thread.join(30)


def settle(api, job_id, statuses=("succeeded", "failed", "cancelled")):
    return wait_for(lambda: (j := api.job(job_id))["status"] in statuses and j, timeout=30,
                    message=f"job {job_id} to settle")


def test_offline_provider_runs_every_job_type(gateway, start_ai, http_gateway, run_worker):
    start_ai()
    api = Api(gateway.test_client())
    snap = api.snapshot(data={"topics": ["fractions", "decimals"], "scores": [0.4, 0.9]})
    jobs = [api.create(jobType=t, snapshotId=snap["id"], params={"count": 2}) for t in JOB_TYPES]
    run_worker(http_gateway, {"offline": OfflineProvider()}, default_provider="offline", concurrency=3)
    for job in jobs:
        done = settle(api, job["id"])
        assert done["status"] == "succeeded", done
        assert schema_errors(job["jobType"], "1", done["result"]["output"]) == []
        assert done["result"]["runtimeInstanceId"] == "worker-1"


def test_deepseek_rate_limit_is_retried_then_succeeds(gateway, start_ai, http_gateway, run_worker, fake):
    start_ai()
    api = Api(gateway.test_client())
    fake.script[:] = ["429", "500", "ok"]
    snap = api.snapshot()
    job = api.create(jobType="quiz_generation", snapshotId=snap["id"], modelName="deepseek-chat")
    run_worker(http_gateway, {"deepseek": DeepSeekProvider(fake.url, "platform-key-1", timeout=5)})
    done = settle(api, job["id"])
    assert done["status"] == "succeeded" and done["retryCount"] == 2 and done["attemptNo"] == 3
    codes = [t.get("errorCode") for t in done["transitions"] if t["to"] == "pending" and t["from"]]
    assert codes == ["MODEL_RATE_LIMIT", "TEMPORARY_PROVIDER_ERROR"]
    req = fake.requests[-1]
    assert req["path"] == "/chat/completions" and req["auth"] == "Bearer platform-key-1"
    assert req["body"]["model"] == "deepseek-chat" and req["body"]["messages"][0]["role"] == "system"


def test_deepseek_timeout_and_bad_answers(gateway, start_ai, http_gateway, run_worker, fake):
    start_ai()
    api = Api(gateway.test_client())
    fake.script[:] = ["slow:2", "garbage", "401"]
    slow = api.create(maxRetryCount=0, targetId="slow")
    run_worker(http_gateway, {"deepseek": DeepSeekProvider(fake.url, "k-123456789", timeout=0.5)})
    assert settle(api, slow["id"])["errorCode"] == "MODEL_TIMEOUT"
    garbage = api.create(targetId="garbage")
    done = settle(api, garbage["id"])
    assert (done["status"], done["errorCode"], done["retryCount"]) == ("failed", "INVALID_SCHEMA", 0)
    refused = api.create(targetId="refused")
    done = settle(api, refused["id"])
    assert (done["status"], done["errorCode"]) == ("failed", "INVALID_CREDENTIAL")


def test_unreachable_provider_is_a_network_error(gateway, start_ai, http_gateway, run_worker):
    start_ai()
    api = Api(gateway.test_client())
    job = api.create(maxRetryCount=0)
    run_worker(http_gateway, {"deepseek": DeepSeekProvider("http://127.0.0.1:9", "k-123456789", timeout=2)})
    assert settle(api, job["id"])["errorCode"] == "NETWORK_ERROR"


def test_user_key_is_fetched_by_the_holder(gateway, start_ai, http_gateway, run_worker, fake):
    start_ai()
    api = Api(gateway.test_client())
    cred = api.c.post("/api/ai/credentials", headers={"Authorization": "Bearer platform-token-1"},
                      json={"userId": "u1", "apiKey": "sk-user-own-key"}).get_json()
    job = api.create(apiKeyMode="user_deepseek_key", credentialId=cred["id"])
    run_worker(http_gateway, {"deepseek": DeepSeekProvider(fake.url, "platform-key-1", timeout=5)})
    assert settle(api, job["id"])["status"] == "succeeded"
    assert fake.requests[-1]["auth"] == "Bearer sk-user-own-key"


def test_cancel_mid_run_stops_the_work(gateway, start_ai, http_gateway, run_worker, fake):
    start_ai(lock_seconds=6)  # heartbeats every 2 s: a busy machine never loses the lease
    api = Api(gateway.test_client())
    fake.script[:] = ["hold"]
    job = api.create()
    worker = run_worker(http_gateway, {"deepseek": DeepSeekProvider(fake.url, "k-123456789", timeout=20)})
    wait_for(lambda: fake.requests, timeout=20, message="the provider call")
    assert api.cancel(job["id"]).get_json()["cancelRequested"] is True
    done = settle(api, job["id"])
    assert done["status"] == "cancelled" and done["result"] is None
    fake.release.set()
    wait_for(lambda: worker.outcomes, timeout=20)
    assert worker.outcomes == [(job["id"], 1, "stopped:CANCEL_REQUESTED")]
    assert api.job(job["id"])["result"] is None


def test_sigterm_drains_the_running_job(gateway, start_ai, http_gateway, fake, tmp_path):
    start_ai()
    api = Api(gateway.test_client())
    fake.script[:] = ["slow:1.5"]
    job = api.create()
    env = {**os.environ, "LINECTL_TOKENS": TOKENS, "LINECTL_RUNTIME_URL": http_gateway,
           "LINECTL_RUNTIME_PROVIDER": "deepseek", "LINECTL_DEEPSEEK_BASE_URL": fake.url,
           "LINECTL_DEEPSEEK_API_KEY": "k-123456789", "LINECTL_DATA_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "services.stack.cli", "runtime", "--poll-interval", "0.1",
                             "--id", "proc-1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: fake.requests, timeout=30, message="the runtime to call the provider")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    done = api.job(job["id"])
    assert done["status"] == "succeeded" and done["result"]["runtimeInstanceId"] == "proc-1"
