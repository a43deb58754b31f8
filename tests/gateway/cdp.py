"""A minimal headless-Chromium driver over the DevTools protocol (websocket-client)."""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
from pathlib import Path

import requests
import websocket

from tests.support.processes import kill_group
from tests.support.waiting import wait_for

CHROMIUM = "/usr/bin/chromium"


# DevTools' errors for an evaluation that a navigation or reload cut short.
NAVIGATED_AWAY = ("Inspected target navigated or closed", "Execution context was destroyed")


class Browser:
    def __init__(self, profile_dir: Path):
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--remote-debugging-port=0", "--remote-allow-origins=*",
             # no calls home: on a closed network they fail and are retried, many at a time
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-quic", f"--user-data-dir={profile_dir}", "--window-size=1400,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        port_file = profile_dir / "DevToolsActivePort"
        port = wait_for(lambda: port_file.exists() and port_file.read_text().split("\n")[0],
                        timeout=30, message="chromium's DevTools port")
        targets = requests.get(f"http://127.0.0.1:{port}/json", timeout=10).json()
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30,
                                              suppress_origin=True)
        self._ids = itertools.count(1)

    def call(self, method: str, **params):
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True,
                           returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def check(self, expression: str) -> bool:
        """A condition on a page that may be (re)loading: errors count as false, the
        page's own and DevTools' when a navigation ends the evaluation half-way."""
        try:
            return bool(self.evaluate(f"(() => {{ try {{ return {expression}; }} catch (e) {{ return false; }} }})()"))
        except RuntimeError as exc:
            if any(gone in str(exc) for gone in NAVIGATED_AWAY):
                return False
            raise

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            kill_group(self.proc)  # Chromium and its renderers
