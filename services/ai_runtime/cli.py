"""``linectl runtime``: flags and their environment defaults.

The runtime's own settings (not in ``shared.config``; read here only):
``LINECTL_RUNTIME_URL`` (gateway base URL; default the local gateway),
``LINECTL_RUNTIME_TOKEN`` (else the first ``runtime`` token of
``LINECTL_TOKENS`` / the data directory's tokens file), ``LINECTL_RUNTIME_ID``,
``LINECTL_RUNTIME_PROVIDER`` (``offline`` | ``deepseek``),
``LINECTL_DEEPSEEK_BASE_URL``, ``LINECTL_DEEPSEEK_API_KEY`` (the platform key).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from shared.config import Settings, SettingsError


def add_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.add_argument("--url", default=env("LINECTL_RUNTIME_URL"), help="gateway base URL")
    p.add_argument("--id", default=env("LINECTL_RUNTIME_ID"), help="runtimeInstanceId")
    p.add_argument("--provider", default=env("LINECTL_RUNTIME_PROVIDER", "offline"),
                   choices=("offline", "deepseek"),
                   help="offline: answer every job with the offline stand-in model (demos);"
                        " deepseek: DeepSeek's API for deepseek jobs (the platform key from"
                        " LINECTL_DEEPSEEK_API_KEY, else only jobs with the user's own key)")
    p.add_argument("--capabilities", default=None, help="comma-separated job types (default: all)")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--poll-interval", type=float, default=2.0)
    p.add_argument("--claim", action="store_true", help="poll with claim: true (lock in the poll)")


def cmd_runtime(settings: Settings, args) -> int:
    from services.ai_jobs.domain import JOB_TYPES
    from services.ai_runtime.client import RuntimeClient
    from services.ai_runtime.providers import DeepSeekProvider, OfflineProvider
    from services.ai_runtime.worker import RuntimeWorker, run_until_signalled
    from shared.config import ensure_tokens

    token = os.environ.get("LINECTL_RUNTIME_TOKEN")
    if not token:
        tokens = ensure_tokens(settings).tokens_for("runtime")
        if not tokens:
            raise SettingsError("LINECTL_RUNTIME_TOKEN: not set and LINECTL_TOKENS has no runtime token")
        token = tokens[0]
    caps = JOB_TYPES
    if args.capabilities:
        caps = [c.strip() for c in args.capabilities.split(",") if c.strip()]
        unknown = sorted(set(caps) - set(JOB_TYPES))
        if unknown or not caps:
            raise SettingsError(f"--capabilities: unknown job types {unknown} (known: {', '.join(JOB_TYPES)})")
    if not 1 <= args.concurrency <= 64:
        raise SettingsError("--concurrency: must be 1..64")
    url = args.url or f"http://{settings.http_host}:{settings.http_port}"
    runtime_id = args.id or f"{socket.gethostname()}-{os.getpid()}"
    if args.provider == "offline":
        providers, stand_in = {"offline": OfflineProvider()}, "offline"
        serving = "every job, answered by the offline stand-in model"
    else:
        platform_key = os.environ.get("LINECTL_DEEPSEEK_API_KEY") or None
        deepseek = DeepSeekProvider(os.environ.get("LINECTL_DEEPSEEK_BASE_URL", "https://api.deepseek.com"),
                                    platform_key)
        providers, stand_in = {"offline": OfflineProvider(), "deepseek": deepseek}, None
        serving = "deepseek and offline jobs"
        if not platform_key:
            # Not fatal: jobs with the user's own key can still be served; the
            # platform-key jobs are left for a runtime that has the key.
            print("linectl runtime: LINECTL_DEEPSEEK_API_KEY is not set: deepseek jobs with"
                  " apiKeyMode=platform_key are left alone; only the users' own keys are served",
                  file=sys.stderr)
            serving = "offline jobs and deepseek jobs with the user's own key"
    worker = RuntimeWorker(RuntimeClient(url, token, runtime_id), providers,
                           capabilities=caps, concurrency=args.concurrency, poll_interval=args.poll_interval,
                           claim=args.claim, default_provider=stand_in)
    print(f"linectl runtime {runtime_id}: gateway {url}, provider {args.provider}: serves {serving}")
    return run_until_signalled(worker)
