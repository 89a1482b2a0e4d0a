"""Headless Chromium for the dashboard tests, over the DevTools protocol on a pipe (no
driver, no package): ``--remote-debugging-pipe`` reads NUL-ended JSON messages on fd 3
and answers on fd 4, as Playwright and Puppeteer drive it. ``load`` opens a page in a
fresh tab, waits for it, and returns what it logged as an error (exceptions,
``console.error``, failed resources, the browser's own log) and a probe's value."""

from __future__ import annotations

import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "google-chrome", "google-chrome-stable", "chromium-browser")
FLAGS = tuple(
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
    " --disable-background-networking --disable-component-update --disable-sync"
    " --disable-extensions --disable-dev-shm-usage --remote-debugging-pipe".split()
)


def find_browser() -> str | None:
    """``$PERFSUITE_CHROMIUM`` or the first Chromium-like browser on PATH."""
    chosen = os.environ.get("PERFSUITE_CHROMIUM")
    found = (shutil.which(name) for name in ([chosen] if chosen else CANDIDATES))
    return next((path for path in found if path), None)


def _above_nine(fd: int) -> int:
    """A copy of ``fd`` numbered 10 or more (the original is closed)."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


class BrowserError(RuntimeError):
    """The browser died, timed out or answered a command with an error."""


@dataclass
class PageReport:
    """What one page load showed."""

    url: str
    errors: list[str] = field(default_factory=list)
    probe: Any = None


class Browser:
    """One headless Chromium process with a fresh profile; use as a context manager."""

    def __init__(self, executable: str, profile: Path, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._next_id = 0
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.events: list[dict[str, Any]] = []
        child_in, self._to_child = os.pipe()  # the browser reads fd 3
        self._from_child, child_out = os.pipe()  # and writes fd 4
        # Above 9, the child's ends cannot be 3 or 4 already (bash moves them there).
        child_in, child_out = (_above_nine(fd) for fd in (child_in, child_out))
        script = f'exec "$0" "$@" 3<&{child_in} 4>&{child_out} {child_in}<&- {child_out}>&-'
        self._log = open(profile.parent / f"{profile.name}.stderr", "wb")  # noqa: SIM115
        # Chromium's singleton socket goes in $TMPDIR, and a Unix socket's path holds at
        # most 107 bytes: under a deep temporary folder the browser dies at start. A short
        # folder of its own, removed on close.
        self._scratch = tempfile.mkdtemp(prefix="chromium-", dir="/tmp")
        self.process = subprocess.Popen(
            ["bash", "-c", script, executable, *FLAGS, f"--user-data-dir={profile}"],
            pass_fds=(child_in, child_out),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            env={**os.environ, "TMPDIR": self._scratch},
        )
        os.close(child_in)
        os.close(child_out)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        with os.fdopen(self._from_child, "rb", buffering=0) as pipe:
            while chunk := pipe.read(1 << 16):
                buffer += chunk
                *messages, buffer = buffer.split(b"\0")
                for message in messages:
                    self._messages.put(json.loads(message))
        self._messages.put(None)  # the browser closed its end

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """One protocol command; its result (events seen meanwhile go to ``events``)."""
        self._next_id += 1
        ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._next(deadline, method)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self.events.append(reply)

    def _next(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        try:
            item = self._messages.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            raise BrowserError(f"no answer to {waiting_for} in {self.timeout:g} s") from None
        if item is None:
            raise BrowserError(f"the browser exited (code {self.process.poll()})")
        return item

    def wait_event(self, method: str, session: str) -> None:
        """Until ``method`` arrives for ``session`` (or was already seen)."""
        deadline = time.monotonic() + self.timeout
        while not any(
            e.get("method") == method and e.get("sessionId") == session for e in self.events
        ):
            self.events.append(self._next(deadline, method))

    def evaluate(self, expression: str, session: str) -> Any:
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = (details.get("exception") or {}).get("description") or details.get("text")
            raise BrowserError(f"{expression[:60]!r}...: {text}")
        return result["result"].get("value")

    def load(
        self, url: str, probe: str = "null", ready: str = "true", actions: str | None = None
    ) -> PageReport:
        """Open ``url``; wait for the load event and for ``ready`` (a JS expression) to be
        true; run ``actions`` (JS) if given; return the errors seen and ``probe``'s value."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        try:
            for domain in ("Runtime", "Log", "Page"):
                self.send(f"{domain}.enable", session=session)
            nav = self.send("Page.navigate", {"url": url}, session)
            if nav.get("errorText"):
                raise BrowserError(f"{url}: {nav['errorText']}")
            self.wait_event("Page.loadEventFired", session)
            deadline = time.monotonic() + self.timeout
            while not self.evaluate(f"Boolean({ready})", session):
                if time.monotonic() > deadline:
                    raise BrowserError(f"{url}: not ready in {self.timeout:g} s: {ready}")
                time.sleep(0.05)
            if actions:
                self.evaluate(actions, session)
            value = self.evaluate(probe, session)
            time.sleep(0.1)  # let late console messages arrive
            self.send("Runtime.evaluate", {"expression": "0"}, session)
        finally:
            self.send("Target.closeTarget", {"targetId": target})
        return PageReport(url, errors_of(self.events, session), value)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_child)
        self._log.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def errors_of(events: list[dict[str, Any]], session: str) -> list[str]:
    """The page's errors, one line each, from the protocol events of its session."""
    out = []
    for event in events:
        if event.get("sessionId") != session:
            continue
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = (details.get("exception") or {}).get("description") or details.get("text")
            out.append(f"exception: {str(text).splitlines()[0]}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            out.append(f"console.{params['type']}: {args}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            out.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())
    return out
