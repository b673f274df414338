import re
import socket

import nats
import pytest
from nats.js.api import StreamConfig

from console.broker.cluster import EmbeddedCluster
from console.broker.server import BatchLimits, EmbeddedServer
from console.errors import EmbeddedServerError


async def test_server_picks_a_free_port_and_keeps_it_across_a_restart(tmp_path):
    server = EmbeddedServer(tmp_path, monitor_port=None)
    with server:
        first_port = server.port
        assert first_port > 0 and server.url.startswith("nats://127.0.0.1:")
        server.restart()
        assert server.port == first_port
        nc = await nats.connect(server.url)
        info = await nc.jetstream().account_info()
        assert info.streams == 0
        await nc.close()
        assert oct(server.log_path.stat().st_mode & 0o777) == "0o600"  # as every other log of the console
    assert not server.running()


def test_batch_limits_reach_the_server_config(tmp_path):
    limits = BatchLimits(timeout=2.5, max_msgs=20, max_inflight_per_stream=3, max_inflight_total=9)
    with EmbeddedServer(tmp_path, batch_limits=limits) as server:
        conf = server.config_path.read_text()
    assert 'timeout: "2500ms"' in conf and "max_msgs: 20" in conf and "max_inflight_total: 9" in conf


def test_a_server_that_cannot_start_says_why(tmp_path):
    with pytest.raises(EmbeddedServerError, match="exited"):
        EmbeddedServer(tmp_path, extra_config="this is { not valid").start(timeout=10)


@pytest.mark.cluster
async def test_a_cluster_whose_route_port_was_taken_meanwhile_starts_on_other_ports_with_every_node(tmp_path):
    """nats-server says it is ready, then exits on a taken route port: CI saw a cluster go on with two
    nodes of three and refuse every R3 stream ('no suitable peers for placement')."""
    cluster = EmbeddedCluster(tmp_path, 3)
    taken = int(re.search(r'listen: "127\.0\.0\.1:(\d+)"', cluster.nodes[1].extra_config).group(1))
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with cluster:
            assert cluster.running()
            async with await nats.connect(cluster.urls) as nc:
                info = await nc.jetstream().add_stream(StreamConfig(name="R3", subjects=["r3"], num_replicas=3))
                assert len(info.cluster.replicas) == 2
    assert f"127.0.0.1:{taken}" not in cluster.nodes[1].extra_config
