"""A local stand-in for DeepSeek's chat-completions API (nothing outside is
reachable here). Each request takes the next scripted behaviour; the last one
repeats. Behaviours: ``ok`` (a schema-valid answer for the job type named in
the prompt), ``429``, ``500``, ``401``, ``garbage``, ``slow:<s>`` (answer after
<s> seconds), ``hold`` (answer once ``release`` is set)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from services.ai_runtime.prompts import LIST_TYPES
from services.ai_runtime.providers import OfflineProvider


class FakeDeepSeek:
    def __init__(self, script=("ok",)):
        self.script = list(script)
        self.requests: list[dict] = []
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                behaviour = fake.script.pop(0) if len(fake.script) > 1 else fake.script[0]
                if behaviour.startswith("slow:"):
                    threading.Event().wait(float(behaviour[5:]))
                    behaviour = "ok"
                if behaviour == "hold":
                    fake.release.wait(30)
                    behaviour = "ok"
                if behaviour.isdigit():
                    return self._send(int(behaviour), {"error": {"message": "scripted"}})
                if behaviour == "garbage":
                    return self._send(200, {"choices": [{"message": {"content": "not json"}}]})
                return self._send(200, {"choices": [{"message": {"role": "assistant",
                                                                 "content": json.dumps(fake.answer(body))}}]})

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def answer(body):
        user = json.loads(body["messages"][1]["content"])
        system = body["messages"][0]["content"]
        job_type = next(t for t in ("learning_state_analysis", *LIST_TYPES) if _asks_for(system, t))
        job = {"jobType": job_type, "targetId": user["target"]["id"], "params": user["params"]}
        output = OfflineProvider().complete(job, {"data": user["snapshot"]}, None)
        return {"items": output} if job_type in LIST_TYPES else output

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


_MARKERS = {
    "learning_state_analysis": "learner's current state",
    "weak_point_analysis": "weak knowledge points",
    "next_action_planning": "next actions",
    "quiz_generation": "quiz questions",
    "flashcard_generation": "flashcards",
}


def _asks_for(system: str, job_type: str) -> bool:
    return _MARKERS[job_type] in system
