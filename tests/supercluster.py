"""A supercluster on loopback for the tests: clusters of nats-server processes (from the wheel), each
node routed to its cluster's others and joined to every cluster by gateways, with an application
account APP and a system account SYS."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from console.broker.cluster import free_port
from console.broker.server import BatchLimits, EmbeddedServer

ACCOUNTS = """
accounts {
  APP { jetstream: enabled, users: [{user: app, password: app-secret}] }
  SYS { users: [{user: sys, password: sys-secret}] }
}
system_account: SYS
"""


class Supercluster:
    def __init__(self, store: Path, clusters: tuple[str, ...] = ("east", "west"), nodes: int = 3,
                 batch_limits: BatchLimits | None = None):
        routes = {c: [free_port() for _ in range(nodes)] for c in clusters}
        gateways = {c: [free_port() for _ in range(nodes)] for c in clusters}
        remote = ", ".join(f'{{name: "{c}", urls: [{", ".join(f"{chr(34)}nats://127.0.0.1:{p}{chr(34)}" for p in ports)}]}}'
                           for c, ports in gateways.items())
        self.nodes: dict[str, list[EmbeddedServer]] = {}
        for c in clusters:
            self.nodes[c] = []
            for i in range(nodes):
                others = ", ".join(f'"nats://127.0.0.1:{p}"' for j, p in enumerate(routes[c]) if j != i)
                block = (f'server_name: "{c}-{i + 1}"\n'
                         f'cluster {{ name: "{c}", listen: "127.0.0.1:{routes[c][i]}", routes: [{others}] }}\n'
                         f'gateway {{ name: "{c}", listen: "127.0.0.1:{gateways[c][i]}", gateways: [{remote}] }}\n'
                         f'{ACCOUNTS}')
                self.nodes[c].append(EmbeddedServer(store / f"{c}-{i + 1}", batch_limits=batch_limits,
                                                    extra_config=block))

    def url(self, cluster: str) -> str:
        return ",".join(n.url for n in self.nodes[cluster])

    def all(self) -> list[EmbeddedServer]:
        return [n for nodes in self.nodes.values() for n in nodes]

    def start(self, timeout: float = 60.0) -> Supercluster:
        for node in self.all():
            node.start(timeout)
        deadline = time.monotonic() + timeout
        while not self._settled():
            assert time.monotonic() < deadline, "no JetStream meta leader every node agrees on"
            time.sleep(0.2)
        return self

    def _get(self, node: EmbeddedServer, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{node.monitor_url}/{path}", timeout=2) as reply:
            found = json.load(reply)
        return found if isinstance(found, dict) else {}

    def _settled(self) -> bool:
        """Every node names one meta leader and has its outbound gateway to every other cluster."""
        try:
            leaders = {(self._get(n, "jsz").get("meta_cluster") or {}).get("leader") for n in self.all()}
            gateways = [self._get(n, "gatewayz") for n in self.all()]
        except OSError:
            return False
        others = len(self.nodes) - 1
        return len(leaders) == 1 and None not in leaders and all(  # a node's inbound ones are other nodes' outbound
            len(g.get("outbound_gateways") or {}) >= others for g in gateways)

    def gateway_traffic(self) -> tuple[int, int]:
        """(messages, payload bytes) every node has sent over its gateways so far (its outbound connections)."""
        msgs = size = 0
        for node in self.all():
            for gateway in (self._get(node, "gatewayz").get("outbound_gateways") or {}).values():
                connection = gateway.get("connection") or {}
                msgs += int(connection.get("out_msgs") or 0)
                size += int(connection.get("out_bytes") or 0)
        return msgs, size

    def stop(self) -> None:
        for node in self.all():
            node.stop()

    def __enter__(self) -> Supercluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
