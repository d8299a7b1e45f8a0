"""Open a page in headless Chromium over the DevTools protocol and report what a person would see.

Speaks the protocol over `--remote-debugging-pipe` (fd 3 in, fd 4 out, NUL-separated JSON), which
needs no port, no websocket client and no extra package. Collects console errors (CSP violations
are reported there), uncaught exceptions and every network request, then takes a screenshot.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["chromium_path", "PageVisit", "visit"]

_TIMEOUT_S = 60


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageVisit:
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL other than the page and data: URIs
    screenshot: bytes = b""


def _above_four(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


class _Pipe:
    def __init__(self, binary: str, profile: str) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # Move the child's ends above 4 so the redirections below cannot clobber one another.
        to_browser_r, from_browser_w = (_above_four(fd) for fd in (to_browser_r, from_browser_w))
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                 "--disable-default-apps", "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"]
        # The protocol pipe must be fds 3 and 4 in the browser; a tiny Python shim puts it there
        # (the Debian `chromium` is a shell script, and dash cannot redirect fds above 9).
        shim = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); os.execv(sys.argv[3], sys.argv[3:])"
        self._process = subprocess.Popen(
            [sys.executable, "-c", shim, str(to_browser_r), str(from_browser_w), binary, *flags],
            pass_fds=(to_browser_r, from_browser_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._messages: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._from_browser, 1 << 16):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for message in messages:
                self._messages.put(json.loads(message))

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            reply = self._next_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str) -> None:
        deadline = time.monotonic() + _TIMEOUT_S
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._next_message(deadline))

    def _next_message(self, deadline: float) -> dict:
        while True:
            try:
                return self._messages.get(timeout=1.0)
            except queue.Empty:
                if self._process.poll() is not None:
                    raise RuntimeError(f"chromium exited with status {self._process.returncode}") from None
                if time.monotonic() > deadline:
                    raise TimeoutError("chromium did not answer within the time limit") from None

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self.events.append(self._messages.get(timeout=left))
            except queue.Empty:
                return

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:  # the browser may already be gone; make sure below
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to_browser)


def visit(page: Path, *, width: int = 1280, height: int = 2000) -> PageVisit:
    """Load `page` from disk, let it settle, and return console errors, requests and a screenshot."""
    binary = chromium_path()
    if binary is None:
        raise FileNotFoundError("chromium is not installed")
    url = page.resolve().as_uri()
    with tempfile.TemporaryDirectory() as profile:
        pipe = _Pipe(binary, profile)
        try:
            target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Network", "Page"):
                pipe.call(f"{domain}.enable", session=session)
            pipe.call("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
            pipe.call("Page.navigate", {"url": url}, session=session)
            pipe.wait_for("Page.loadEventFired")
            pipe.drain(0.5)  # late console messages and requests
            shot = pipe.call("Page.captureScreenshot", {"format": "png"}, session=session)
        finally:
            pipe.close()
    result = PageVisit(screenshot=base64.b64decode(shot["data"]))
    for event in pipe.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            result.console_errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            result.console_errors.append(params.get("exceptionDetails", {}).get("text", "exception"))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            result.console_errors.append(params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            requested = params.get("request", {}).get("url", "")
            if requested != url and not requested.startswith("data:"):
                result.requests.append(requested)
    return result
