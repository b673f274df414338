"""`batch-console up`: every part of the console under one supervisor. Each part is its own process
(the same commands the Procfile runs), logging to DATA_DIR/logs; one that dies is named, with the
last line it wrote, and restarted after a backoff that doubles from 1 s to 60 s, for as long as
`up` runs, while the others carry on. The parts' states are also in DATA_DIR/logs/up.json."""

from __future__ import annotations

import json
import os
import ctypes
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from console.backoff import Backoff
from console.config import (EMBEDDED_SYSTEM_USER, METRICS_FD_ENV, SERVER_READY, UP_DRIVER_MEMORY, UP_FILE,
                            AlertingSettings, AnalyticsSettings, ConnectionSettings, Settings, SystemAccountSettings,
                            child_env, data_settings_of, embedded_system_password, env_name, host_in_url,
                            private_dir, private_file)
from console.demo import DEMO_SUBJECTS
from console.errors import ConfigError, ConsoleError

CLI = str(Path(sys.executable).parent / "batch-console")
STABLE_AFTER = 60.0  # a part that ran this long has recovered: its next failure waits the first pause again


def _restarts() -> Backoff:
    """Before a part's restart: 1 s doubled after each failure in a row, to a minute."""
    return Backoff(first=1.0, most=60.0, stable_after=STABLE_AFTER)


def _ended_with_the_supervisor() -> None:
    """In the part, before it runs: a SIGTERM when the supervisor dies, however it dies (even killed
    outright), so no part outlives it (Linux; elsewhere the supervisor's own stop is all there is)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG




@dataclass
class Part:
    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = None
    restarts: Backoff = field(default_factory=_restarts)
    restart_at: float | None = None  # when it is down and waiting to be started again
    last_exit: str | None = None
    log_from: int = 0  # where this start's output begins in the log, which keeps every start's
    pass_fds: tuple[int, ...] = ()  # the supervisor's sockets each start inherits
    may_finish: bool = False  # its work can end (the demo's rounds): an exit with code 0 is done, not a failure

    def start(self) -> None:
        self.restart_at = None
        self.restarts.started()
        log = open(private_file(self.log_path), "a")
        self.log_from = log.seek(0, os.SEEK_END)
        self.proc = subprocess.Popen([CLI, *self.args], stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True,  # Ctrl-C reaches the supervisor, not each part
                                     preexec_fn=_ended_with_the_supervisor, pass_fds=self.pass_fds)
        log.close()

    @property
    def started(self) -> subprocess.Popen[bytes]:
        """Its process, once started (every part is, before it is looked at)."""
        if self.proc is None:
            raise ConsoleError(f"{self.name} was never started")
        return self.proc

    @property
    def state(self) -> str:
        if self.proc is None:
            return "not started"
        if self.restart_at is not None:
            return f"restarting in {max(0.0, self.restart_at - time.monotonic()):.0f} s"
        code = self.proc.poll()
        if code == 0 and self.may_finish:
            return "finished"
        return f"running (pid {self.proc.pid})" if code is None else f"exited ({code})"

    @property
    def failures(self) -> int:
        """Its failures in a row (none once it has run STABLE_AFTER seconds)."""
        return 0 if self.restarts.recovered else self.restarts.failures

    def output(self) -> str:
        """What this start of the part wrote so far."""
        with open(self.log_path, "rb") as log:
            log.seek(self.log_from)
            return log.read().decode(errors="replace")

    def last_words(self) -> str:
        """The part's own error line near the end of its log (Spark and nats-py log after it), else its last line."""
        lines = [line for line in self.output().splitlines() if line.strip()][-30:]
        said = [line for line in lines if line.startswith("batch-console:") or "Error" in line]
        return (said or lines or ["(no output)"])[-1][:300]

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Supervisor:
    def __init__(self, settings: Settings, out: Any = sys.stdout) -> None:
        if settings.demo.demo:  # the collector taps the demo's publish side, so its atomic losses have names
            tapped = (*settings.collector.tap_publish_subjects, *DEMO_SUBJECTS)
            settings = replace(settings, collector=replace(settings.collector, tap_publish_subjects=tapped))
        self.settings, self.out = settings, out
        self.systems = settings.systems()  # a systems file with an error stops up, with its line
        if self.systems and settings.demo.demo:
            raise ConfigError("--demo publishes to the embedded nats-server: not with --systems")
        # Every setting reaches the parts in their environment (secrets included), never their argv; of
        # several systems, each part reads the systems file (the connection given is the file's first)
        self._env = {**os.environ, **child_env(settings.of_system(self.systems[0]) if self.systems else settings)}
        self.logs = settings.data.data_dir / "logs"
        private_dir(self.logs)
        self.parts: list[Part] = []
        self.embedded = "connection.servers" not in settings.given and not self.systems
        self._stopping = False
        self._metrics_listener: socket.socket | None = None

    def _say_where_alerts_go(self) -> None:
        from console.alerting.rules_file import load_rules, rules_path
        from console.domain.alert_rules import without_targets

        try:
            rules = load_rules(rules_path(self.settings.alerting.rules, self.settings.data.data_dir),
                               self.settings.notify_targets())
        except (ValueError, OSError):  # the alerts part says what is wrong with the file
            return
        if (note := without_targets(rules)) is not None:
            self.say(f"alerts: {note}")

    def say(self, text: str) -> None:
        print(f"[up] {text}", file=self.out, flush=True)

    def _part(self, name: str, args: list[str], env: dict[str, str] | None = None,
              pass_fds: tuple[int, ...] = ()) -> Part:
        part = Part(name, args, self.logs / f"{name}.log", env or self._env, pass_fds=pass_fds)
        self.parts.append(part)
        part.start()
        self.say(f"{name}: {part.state}, log {part.log_path}")
        return part

    def start(self) -> None:
        if self.embedded:
            ready = self.settings.data.data_dir / "nats" / SERVER_READY
            ready.unlink(missing_ok=True)  # a stopped server's: this start writes its own
            nats = self._part("nats", ["server"])
            url, monitor = self._wait_for_server(nats, ready)
            self._env[env_name(ConnectionSettings, "servers")] = url
            if monitor and "connection.monitor_url" not in self.settings.given:  # the server's limits, for every part
                self._env[env_name(ConnectionSettings, "monitor_url")] = monitor
            system = self.settings.system
            # the single server's own system user (an embedded cluster has none: `server` gives it no accounts)
            password = embedded_system_password(self.settings.data.data_dir) if self.settings.embedded.nats_nodes == 1 \
                else None
            if not (system.system_user or system.system_creds) and password is not None:
                self._env[env_name(SystemAccountSettings, "system_user")] = EMBEDDED_SYSTEM_USER
                self._env[env_name(SystemAccountSettings, "system_password")] = password
        url = self._env[env_name(ConnectionSettings, "servers")]
        self.settings.keyed_event_log(make=True)  # before the parts: the readers never make one
        web = self.settings.web
        console_url = self.settings.alerting.console_url or f"http://{host_in_url(web.address)}:{web.port}"
        self._env.setdefault(env_name(AlertingSettings, "console_url"), console_url)  # absolute links in reports
        self._part("collector", ["collect"])
        without = set(self.settings.demo.without)
        for name in sorted(without):
            self.say(f"{name}: not started (--without)")
        if "web" not in without:
            self._part("web", ["serve"])
        if "analytics.driver_memory" not in self.settings.given:  # beside every other part, on one machine
            self._env[env_name(AnalyticsSettings, "driver_memory")] = UP_DRIVER_MEMORY
        if "analytics" not in without:
            self._part("analytics", ["analytics"])
        metrics_port, handed = self.settings.alerting.metrics_port, tuple[int, ...]()
        if metrics_port is None and "alerts" not in without:  # up gives the alerts part one: beside the web console's, or any free one
            # bound here and held: nobody takes it between up's choice and the part's bind, or while it restarts
            self._metrics_listener = _metrics_listener(web.port + 1 if web.port else 0)
            metrics_port = self._metrics_listener.getsockname()[1]
            handed = (self._metrics_listener.fileno(),)
        if metrics_port is not None:
            self._env[env_name(AlertingSettings, "metrics_port")] = str(metrics_port)  # like every setting: not on argv
        if "alerts" not in without:
            self._part("alerts", ["alerts"], {**self._env, METRICS_FD_ENV: str(handed[0])} if handed else None, handed)
        if self.settings.demo.demo:
            self._part("demo", ["demo"]).may_finish = self.settings.demo.demo_rounds is not None
        if "canary" not in without and (self.settings.demo.canary or self.settings.demo.demo):  # every page has something
            self._part("canary", ["canary"])
        if self.systems:
            self.say(f"systems: {', '.join(s.name for s in self.systems)}: each collected, kept (DATA_DIR/systems/NAME) "
                     "and alerted on by the parts above")
        where = f"systems {', '.join(s.name for s in self.systems)}" if self.systems else f"NATS {url}"
        if "web" not in without:
            self.say(f"console: http://{host_in_url(web.address)}:{web.port}/  ({where}; Ctrl-C stops everything)")
        if "alerts" not in without:
            self.say(f"metrics: http://127.0.0.1:{metrics_port}/metrics (alerts: DATA_DIR/logs/alerts.log)")
        self._write_urls(url, console_url, None if "alerts" in without else metrics_port)
        if "alerts" not in without:
            self._say_where_alerts_go()

    def _write_urls(self, nats_url: str, console_url: str, metrics_port: int | None) -> None:
        """DATA_DIR/up.json: every URL this `up` chose and the data settings it was given (its decoders, masking
        rules, objectives), for the commands run beside it (config.beside_up)."""
        env, path = self._env, self.settings.data.data_dir / UP_FILE
        found = {"pid": os.getpid(), "nats": nats_url, "monitor": env.get(env_name(ConnectionSettings, "monitor_url")),
                 "console": console_url,
                 "metrics": None if metrics_port is None else f"http://127.0.0.1:{metrics_port}/metrics",
                 "system_user": env.get(env_name(SystemAccountSettings, "system_user")) if self.embedded else None,
                 "data": data_settings_of(self.settings)}
        temp = private_file(path.with_suffix(".tmp"))
        temp.write_text(json.dumps(found))
        temp.replace(path)

    def _wait_for_server(self, part: Part, ready: Path, timeout: float = 30.0) -> tuple[str, str | None]:
        """The embedded server's URL and monitor URL, as the `server` part writes them once it runs."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                found = json.loads(ready.read_text())
                return str(found["url"]), found.get("monitor_url")
            except (OSError, ValueError, KeyError, TypeError):  # not yet written, or half written
                pass
            if part.started.poll() is not None or time.monotonic() > deadline:
                raise ConsoleError(f"the embedded nats-server did not start: {part.last_words()}")
            time.sleep(0.1)

    def check(self) -> None:
        """One pass: schedule a restart for what died, start what is due, say what happened."""
        now = time.monotonic()
        for part in self.parts:
            if part.restart_at is not None:
                if now >= part.restart_at:
                    part.start()
                    self.say(f"{part.name}: restarted, {part.state}")
                continue
            if part.started.poll() is None:
                continue
            if part.state == "finished":
                if part.last_exit != "finished":
                    part.last_exit = "finished"
                    self.say(f"{part.name}: finished")
                continue
            part.restart_at = now + part.restarts.wait()
            part.last_exit = f"code {part.started.returncode}: {part.last_words()}"
            self.say(f"{part.name} exited with {part.last_exit}; {part.state} (failure {part.failures} in a row)")
        self._write_states()

    def states(self) -> dict[str, dict[str, Any]]:
        """What each part is doing, for a status bar: state, failures in a row, how it last ended."""
        return {p.name: {"state": p.state, "failures": p.failures, "last_exit": p.last_exit} for p in self.parts}

    def _write_states(self) -> None:
        temp = self.logs / "up.json.tmp"
        temp.write_text(json.dumps(self.states()))
        temp.replace(self.logs / "up.json")

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

    def _on_signal(self, *_: Any) -> None:
        self._stopping = True

    def stop(self) -> None:
        self.say("stopping")
        others = [part for part in self.parts if part.name != "nats"]
        for part in others:  # all at once: a slow one (Spark) keeps nobody waiting
            part.terminate()
        for part in [*others, *(p for p in self.parts if p.name == "nats")]:  # the server last: the others flush to it
            part.stop()
            self.say(f"{part.name}: stopped")
        self._write_states()  # up.json says each part's state after the stop, not the last one seen running
        (self.settings.data.data_dir / UP_FILE).unlink(missing_ok=True)
        if self._metrics_listener is not None:
            self._metrics_listener.close()


def _metrics_listener(preferred: int) -> socket.socket:
    """A socket listening on `preferred` if it is free on the loopback, else on one that is: a taken port
    would have the alerts part fail at every restart, and the URL up prints must be the one it serves."""
    for port in (preferred, 0) if preferred else (0,):
        try:
            return socket.create_server(("127.0.0.1", port))
        except OSError:
            continue
    raise ConsoleError("no free port on 127.0.0.1 for the alerts part's /metrics")
