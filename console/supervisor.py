"""`batch-console up`: every part of the console under one supervisor. Each part is its own process
(the same commands the Procfile runs), logging to DATA_DIR/logs; one that dies is named, with the
last line it wrote, and restarted (a bounded number of times) while the others carry on."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from console.errors import ConsoleError

CLI = str(Path(sys.executable).parent / "batch-console")
MAX_RESTARTS = 5  # within RESTART_WINDOW seconds; past it the part stays down and says so
RESTART_WINDOW = 300.0


@dataclass
class Part:
    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    restarts: list[float] = field(default_factory=list)
    failed: bool = False

    def start(self) -> None:
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen([CLI, *self.args], stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)  # Ctrl-C reaches the supervisor, not each part
        log.close()

    @property
    def state(self) -> str:
        if self.failed:
            return "FAILED (restart limit reached)"
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        return f"running (pid {self.proc.pid})" if code is None else f"exited ({code})"

    def last_words(self) -> str:
        lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        return lines[-1][:300] if lines else "(no output)"

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass(frozen=True)
class UpOptions:
    data_dir: Path
    server: str | None = None  # None: run the embedded nats-server
    port: int = 8050
    nats_port: int = 4222
    demo: bool = False
    analytics_every: float = 60.0
    connection_args: tuple[str, ...] = ()  # --creds FILE, --tls-ca FILE ... for an existing server
    event_key_file: str | None = None  # None: the parts share DATA_DIR/event.key


class Supervisor:
    def __init__(self, options: UpOptions, secrets: dict[str, str] | None = None, out=sys.stdout):
        self.options, self.out = options, out
        self._env = {**os.environ, **(secrets or {})}  # token and password reach the parts, never their argv
        self.logs = options.data_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.parts: list[Part] = []
        self.server_url = options.server
        self._stopping = False

    def say(self, text: str) -> None:
        print(f"[up] {text}", file=self.out, flush=True)

    def _part(self, name: str, args: list[str]) -> Part:
        part = Part(name, args, self.logs / f"{name}.log", self._env)
        self.parts.append(part)
        part.start()
        self.say(f"{name}: {part.state}, log {part.log_path}")
        return part

    def start(self) -> None:
        o = self.options
        if self.server_url is None:
            nats = self._part("nats", ["server", "--data-dir", str(o.data_dir), "--port", str(o.nats_port)])
            self.server_url = self._wait_for_server(nats)
        url, data = self.server_url, str(o.data_dir)
        connection = ["--server", url, *o.connection_args]
        keyed = ["--data-dir", data, *(["--event-key-file", o.event_key_file] if o.event_key_file else [])]
        self._part("collector", ["collect", *connection, *keyed])
        self._part("web", ["serve", *connection, "--port", str(o.port), *keyed])
        self._part("analytics", ["analytics", "--every", f"{o.analytics_every:g}", *connection, *keyed])
        if o.demo:
            self._part("demo", ["demo", *connection])
        self.say(f"console: http://127.0.0.1:{o.port}/  (NATS {url}; Ctrl-C stops everything)")

    def _wait_for_server(self, part: Part, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(r"nats://[\d.]+:\d+", part.log_path.read_text(errors="replace"))
            if found:
                return found.group(0)
            if part.proc.poll() is not None or time.monotonic() > deadline:
                raise ConsoleError(f"the embedded nats-server did not start: {part.last_words()}")
            time.sleep(0.1)

    def check(self) -> None:
        """One pass: restart what died (within the limit), say what happened."""
        now = time.monotonic()
        for part in self.parts:
            if part.failed or part.proc.poll() is None:
                continue
            self.say(f"{part.name} exited with code {part.proc.returncode}: {part.last_words()}")
            part.restarts = [t for t in part.restarts if now - t < RESTART_WINDOW] + [now]
            if len(part.restarts) > MAX_RESTARTS:
                part.failed = True
                self.say(f"{part.name}: {MAX_RESTARTS} restarts in {RESTART_WINDOW:g} s, left down; the others go on")
                continue
            part.start()
            self.say(f"{part.name}: restarted, {part.state}")

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        try:
            self.start()
            while not self._stopping:
                self.check()
                time.sleep(0.5)
        finally:
            self.stop()
        return 0

    def _on_signal(self, *_) -> None:
        self._stopping = True

    def stop(self) -> None:
        self.say("stopping")
        for part in reversed(self.parts):  # the server last: the others flush to it first
            part.stop()
            self.say(f"{part.name}: stopped")
