"""`batch-console maintain restart NODE --run COMMAND` and `rolling` on a real three-node cluster, the
nodes restarted as an operator's command does it (tests/restart_node.py: the server's lame duck signal,
or SIGTERM, then the same configuration started again): the node is drained first, the command run, the
node waited for until it has a new server id and is current in every group, and a publisher that
follows holds loses no batch. A command that fails, hangs or restarts nothing is said, never a success;
a name that is not a server's runs no command."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import nats
import pytest
from nats.js.api import StreamConfig

from console.broker.cluster import EmbeddedCluster
from console.broker.maintenance import read_groups
from console.config import ConnectionSettings, env_name, event_key
from tests.conftest import CLUSTER_LIMITS
from tests.integration.steady import SteadyPublisher
from tests.processes import CLI
from tests.waits import eventually, poll_until

pytestmark = pytest.mark.cluster
# a lame duck closes its clients over lame_duck_duration (30 s at least) less the grace period
LAME_DUCK = 'lame_duck_duration: "30s"\nlame_duck_grace_period: "1s"\n'


@pytest.fixture(scope="module")
def restart_cluster(tmp_path_factory):
    """A node started again by the command binds the ports it had (written into its configuration once
    picked), and is stopped at the end all the same (EmbeddedServer.stop)."""
    with EmbeddedCluster(tmp_path_factory.mktemp("restart"), 3, batch_limits=CLUSTER_LIMITS,
                         extra_config=LAME_DUCK) as cluster:
        yield cluster
    poll_until(lambda: not any(n._restarted_elsewhere() for n in cluster.nodes), 15, "the restarted nodes stopped")


def maintain(cluster, data_dir, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "maintain", *args, "--server", cluster.url, "--data-dir", str(data_dir),
                           "--batch-timeout", str(CLUSTER_LIMITS.timeout)],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def restart_command(cluster, how: str = "ldm") -> str:
    return f"{sys.executable} -m tests.restart_node {cluster.store_dir}/{{node}} --signal {how}"


async def settled(cluster) -> None:
    """Every group led and each of its replicas current: a restart just before leaves some behind a
    while, and a plan then is refused for the quorum it would risk (CI saw it)."""
    async with await nats.connect(cluster.urls) as nc:
        async def current() -> bool:
            groups = await read_groups(nc)
            return all(g.leader for g in groups) and all(up and not off for g in groups for _, up, off in g.peers)

        await eventually(current, timeout=90, what="every group's replicas current", every=0.5)


def pid(cluster, node: str) -> int:
    return int(cluster.node(node).pid_path.read_text())


async def _stream_led_by_one(nc) -> str:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="RS_A", subjects=["rs_a.>"], num_replicas=3, allow_atomic=True))
    return (await js.stream_info("RS_A")).cluster.leader


async def test_a_node_is_drained_restarted_in_lame_duck_and_back_and_a_following_publisher_loses_nothing(
        restart_cluster, tmp_path):
    from console.broker.holds import Holds

    cluster = restart_cluster
    event_key(data_dir=tmp_path)
    async with await nats.connect(cluster.urls) as nc:
        node = await _stream_led_by_one(nc)
    before = pid(cluster, node)
    others = [n.url for i, n in enumerate(cluster.nodes) if f"n{i + 1}" != node]  # the lame duck closes its clients
    publisher = await nats.connect(others, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    holds = await Holds.follow(publisher, "test publisher")
    steady = SteadyPublisher(publisher, "rs_a.x", holds).start()
    try:
        done = await asyncio.to_thread(maintain, cluster, tmp_path, "restart", node, "--run", restart_command(cluster),
                                       "--format", "json")
    finally:
        await steady.stop()
        await holds.close()
        await publisher.close()
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    [restart] = said["restarts"]
    assert said["ledger"]["recorded"] is False  # no collector runs here: the ledger cannot tell
    assert restart["node"] == node and restart["error"] is None and restart["new_server_id"] is True, restart
    assert restart["moved"] >= 1 and restart["back_after_seconds"] > 0
    assert "exited; starting it again" in done.stderr  # the command's own output, shown as it ran
    assert pid(cluster, node) != before
    assert steady.lost == 0 and steady.committed > 0, (steady.lost, steady.committed)
    async with await nats.connect(cluster.urls) as nc:  # back as a follower of RS_A, current (CI under load: a
        # moment after it is back, it may still be catching up)
        def current(info) -> bool:
            return [(r.name, r.current) for r in info.cluster.replicas if r.name == node] == [(node, True)]

        info = await eventually(lambda: nc.jetstream().stream_info("RS_A"), current, timeout=30,
                                what=f"{node} a current follower of RS_A")
        assert info.cluster.leader != node
    trail = subprocess.run([CLI, "audit", "--server", cluster.url, "--data-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
    assert f"maintain.restart {node}" in trail.stdout and f"{node}: restarted (a new server id)" in trail.stdout, \
        trail.stdout
    assert sys.executable not in trail.stdout  # the command is not recorded: it can name the operator's keys


async def test_a_following_publisher_on_the_restarted_node_leaves_it_between_batches_and_loses_nothing(
        restart_cluster, tmp_path):
    """The lame duck closes the node's clients: a publisher that follows holds hears its notice, begins no
    batch, lets the open one commit and moves to another server itself, so no answer is lost in a reconnect."""
    from console.broker.holds import Holds

    cluster = restart_cluster
    event_key(data_dir=tmp_path)
    await settled(cluster)
    async with await nats.connect(cluster.urls) as nc:
        node = await _stream_led_by_one(nc)
    urls = {f"n{i + 1}": n.url for i, n in enumerate(cluster.nodes)}
    publisher = await nats.connect([urls[node]] + [u for n, u in urls.items() if n != node], dont_randomize=True,
                                   max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    assert publisher._server_info["server_name"] == node  # on the node that is restarted
    holds = await Holds.follow(publisher, "test publisher")
    steady = SteadyPublisher(publisher, "rs_a.x", holds).start()
    try:
        done = await asyncio.to_thread(maintain, cluster, tmp_path, "restart", node, "--run", restart_command(cluster),
                                       "--format", "json")
        committed = steady.committed

        async def since() -> int:
            return steady.committed - committed
        await eventually(since, lambda n: n > 5, timeout=30, what="batches after the restart")
    finally:
        await steady.stop()
        await holds.close()
        await publisher.close()
    assert done.returncode == 0, done.stderr
    assert holds.left == [node] and steady.lost == 0, (holds.left, steady.lost, steady.committed)


async def test_a_command_that_fails_hangs_or_restarts_nothing_is_said_and_a_name_not_a_servers_runs_nothing(
        restart_cluster, tmp_path):
    cluster = restart_cluster
    event_key(data_dir=tmp_path)
    await settled(cluster)
    node = "n3"
    failed = maintain(cluster, tmp_path, "restart", node, "--run", "echo going; exit 3")
    assert failed.returncode == 1 and f"{node}: NOT RESTARTED SAFELY: the command failed with exit code 3" in \
        failed.stdout, failed.stdout + failed.stderr
    assert "| going" in failed.stderr

    hung = maintain(cluster, tmp_path, "restart", node, "--run", "sleep 120", "--run-timeout", "2")
    assert hung.returncode == 1 and "did not finish within 2 s: killed" in hung.stdout, hung.stdout + hung.stderr

    secret = "s3cr3t-t0ken-of-the-console"
    idle = maintain(cluster, tmp_path, "restart", node, "--run", "echo node={node} token=${%s}" % env_name(
        ConnectionSettings, "token"), "--back-timeout", "3", env={env_name(ConnectionSettings, "token"): secret})
    assert idle.returncode == 1 and "the command succeeded but the node did not restart" in idle.stdout, \
        idle.stdout + idle.stderr
    assert f"node={node} token=" in idle.stderr and secret not in idle.stderr + idle.stdout  # not passed on

    planted = tmp_path / "planted"
    forged = maintain(cluster, tmp_path, "restart", f"x;touch${{IFS}}{planted}", "--run", "echo {node}")
    assert forged.returncode == 1 and "is not a server of this cluster" in forged.stdout + forged.stderr, \
        forged.stdout + forged.stderr
    assert not planted.exists() and "| x" not in forged.stderr  # refused before the command: nothing ran


async def test_a_rolling_restart_takes_every_node_in_turn_each_back_before_the_next(restart_cluster, tmp_path):
    cluster = restart_cluster
    event_key(data_dir=tmp_path)
    await settled(cluster)
    before = {f"n{i + 1}": pid(cluster, f"n{i + 1}") for i in range(3)}
    done = maintain(cluster, tmp_path, "rolling", "--run", restart_command(cluster, "term"), "--format", "json")
    assert done.returncode == 0, done.stderr
    restarts = json.loads(done.stdout)["restarts"]
    assert [r["node"] for r in restarts] == ["n1", "n2", "n3"]  # no system account: the meta leader is not known
    assert all(r["error"] is None and r["new_server_id"] for r in restarts), restarts
    assert all(pid(cluster, n) != before[n] for n in before)
    assert "the meta leader is not known" in done.stderr
