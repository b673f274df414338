"""A hub and a leaf node, each its own JetStream domain (nats-server processes on loopback), the hub
sourcing the leaf's atomic stream: a batch abandoned at the leaf reaches the collector beside the hub with
its domain (the advisory crosses the leaf connection and names "domain": "leaf1", verified on 2.15.1), and
Live shows the domain beside the loss. With the leaf's domain named (--domain), its advisories are kept
at the leaf too: a loss while the leaf is cut off from the hub reaches the hub's log once it is back."""

from __future__ import annotations

import json
import subprocess
from contextlib import contextmanager

import nats
from nats.js.api import ExternalStream, StreamConfig, StreamSource

from console.broker.atomic import AtomicBatch
from console.broker.cluster import free_port
from console.broker.eventlog import EventLog
from console.broker.server import EmbeddedServer
from console.config import DataSettings, Settings
from console.domain.events import EventKind
from console.domain.live_model import LiveModel
from console.ui.live import LivePage, notices_html, recent_frame
from tests.conftest import TEST_LIMITS
from tests.processes import CLI, wait_collecting
from tests.waits import eventually

LEAF_CONFIG = 'server_name: "{name}"\nleafnodes {{ remotes: [ {{ url: "nats://127.0.0.1:{port}" }} ] }}\n'


async def test_a_loss_at_each_of_two_leaves_reaches_the_hubs_collector_with_its_domain(tmp_path):
    port = free_port()
    with EmbeddedServer(tmp_path / "hub", batch_limits=TEST_LIMITS, jetstream_config='domain: "hub"',
                        extra_config=f'server_name: "hub"\nleafnodes {{ listen: "127.0.0.1:{port}" }}\n') as hub, \
            EmbeddedServer(tmp_path / "leaf1", batch_limits=TEST_LIMITS, jetstream_config='domain: "leaf1"',
                           extra_config=LEAF_CONFIG.format(name="leaf1", port=port)) as leaf1, \
            EmbeddedServer(tmp_path / "leaf2", batch_limits=TEST_LIMITS, jetstream_config='domain: "leaf2"',
                           extra_config=LEAF_CONFIG.format(name="leaf2", port=port)) as leaf2:
        log = open(tmp_path / "collector.log", "w")
        collector = subprocess.Popen([CLI, "collect", "--server", hub.url, "--data-dir", str(tmp_path / "data"),
                                      "--batch-timeout", "1"], stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_collecting(collector, tmp_path / "collector.log")
            async with await nats.connect(leaf1.url) as at_leaf1, await nats.connect(leaf2.url) as at_leaf2, \
                    await nats.connect(hub.url) as at_hub:
                for leaf, at_leaf in (("leaf1", at_leaf1), ("leaf2", at_leaf2)):
                    await at_leaf.jetstream().add_stream(StreamConfig(name="EDGE", subjects=[f"{leaf}.>"],
                                                                      allow_atomic=True))

                async def sourced() -> bool:  # the leaf's domain answers over the leaf connection once it is up
                    await at_hub.jetstream().add_stream(StreamConfig(name="HUB_EDGE", sources=[StreamSource(
                        name="EDGE", external=ExternalStream(api="$JS.leaf1.API"))]))
                    return True

                await eventually(sourced, timeout=30, what="the hub's source of the leaf's stream")
                for leaf, at_leaf in (("leaf1", at_leaf1), ("leaf2", at_leaf2)):
                    # one message and no more: the leaf's server abandons it after 1 s
                    await AtomicBatch(at_leaf, batch_id=f"lost-at-{leaf}").add(f"{leaf}.x", b"1")
                events = EventLog.over(at_hub, Settings(data=DataSettings(data_dir=tmp_path / "data")).keyed_event_log(
                    make=False))

                async def lost() -> list:
                    return [e for _, e in await events.read(1, idle_timeout=0.5)
                            if e.kind is EventKind.ATOMIC_ABANDONED and e.batch_id.startswith("lost-at-")]

                found = await eventually(lost, lambda es: len(es) == 2, timeout=60, every=0.5,
                                         what="each leaf's loss in the hub's event log")
        finally:
            collector.terminate()
            collector.wait(timeout=60)
    assert sorted((e.batch_id, e.stream, e.domain) for e in found) == [
        ("lost-at-leaf1", "EDGE", "leaf1"), ("lost-at-leaf2", "EDGE", "leaf2")]
    model = LiveModel()
    for event in found:
        model.apply(event)
    frame = recent_frame(model)
    assert "domain" in frame.columns and sorted(frame["domain"]) == ["leaf1", "leaf2"]
    assert list(recent_frame(model, domain="leaf1")["batch_id"]) == ["lost-at-leaf1"]
    page = LivePage(model=model, domain="leaf2")  # Live's filter, as its URL's ?domain= sets it
    assert list(page._table.value["batch_id"]) == ["lost-at-leaf2"]
    page.domain = "a.b"  # not a name the wire takes: said, and every loss shown
    assert "Not a domain" in page._domain_said.object and len(page._table.value) == 2


async def test_a_loss_at_a_leaf_cut_off_from_the_hub_reaches_the_hubs_log_once_it_is_back(tmp_path):
    port = free_port()
    hub_config = dict(batch_limits=TEST_LIMITS, jetstream_config='domain: "hub"',
                      extra_config=f'server_name: "hub"\nleafnodes {{ listen: "127.0.0.1:{port}" }}\n')
    with EmbeddedServer(tmp_path / "hub", **hub_config) as hub, \
            EmbeddedServer(tmp_path / "leaf", batch_limits=TEST_LIMITS, jetstream_config='domain: "leaf1"',
                           extra_config=LEAF_CONFIG.format(name="leaf1", port=port)) as leaf:
        log = open(tmp_path / "collector.log", "w")
        collector = subprocess.Popen([CLI, "collect", "--server", hub.url, "--data-dir", str(tmp_path / "data"),
                                      "--batch-timeout", "1", "--domain", "leaf1"], stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_collecting(collector, tmp_path / "collector.log")
            async with await nats.connect(leaf.url) as at_leaf:
                js = at_leaf.jetstream()
                await js.add_stream(StreamConfig(name="EDGE", subjects=["edge.>"], allow_atomic=True))
                kept = await eventually(lambda: js.stream_info("BATCH_CONSOLE_ADVISORIES"), timeout=60,
                                        what="the leaf's own advisory stream")
                assert kept.config.subjects == ["$JS.EVENT.ADVISORY.>"]
                await AtomicBatch(at_leaf, batch_id="lost-while-linked").add("edge.x", b"1")
                hub_url = hub.url
                events = await _log_events(hub_url, tmp_path, {"lost-while-linked"})
                hub.stop()  # the leaf is cut off: its advisories reach no one on the hub's side
                await AtomicBatch(at_leaf, batch_id="lost-while-cut-off").add("edge.x", b"1")

                async def kept_at_the_leaf() -> bool:
                    last = await js.get_last_msg("BATCH_CONSOLE_ADVISORIES", "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.EDGE")
                    return b"lost-while-cut-off" in last.data

                await eventually(kept_at_the_leaf, timeout=30, what="the loss kept at the leaf")
                hub.start()
                events = await _log_events(hub_url, tmp_path, {"lost-while-linked", "lost-while-cut-off"})
        finally:
            collector.terminate()
            collector.wait(timeout=60)
    assert sorted((e.batch_id, e.domain) for e in events) == [("lost-while-cut-off", "leaf1"), ("lost-while-linked", "leaf1")]


async def _log_events(url: str, tmp_path, batches: set[str]) -> list:
    """The abandonments of these batches in the hub's event log, once each of them is there (each once)."""
    async with await nats.connect(url) as at_hub:
        log = EventLog.over(at_hub, Settings(data=DataSettings(data_dir=tmp_path / "data")).keyed_event_log(make=False))

        async def found() -> list:
            return [e for _, e in await log.read(1, idle_timeout=0.5)
                    if e.kind is EventKind.ATOMIC_ABANDONED and e.batch_id in batches]

        return await eventually(found, lambda es: {e.batch_id for e in es} == batches, timeout=60,
                                what=f"{sorted(batches)} in the hub's event log", every=0.5)


async def test_a_hub_stream_copying_a_leafs_atomic_stream_is_named_once_the_leafs_domain_is(tmp_path):
    """BATCH_026 across domains: the hub's copy of the leaf's atomic stream, read through $JS.leaf1.API;
    a stream of the hub that has the same name as the leaf's is not taken for the copy's origin."""
    with hub_and_leaf(tmp_path, "leaf1") as hub:
        async with await nats.connect(hub.url) as at_hub:
            leaf_js = at_hub.jetstream(domain="leaf1")
            await eventually(lambda: leaf_js.add_stream(StreamConfig(name="EDGE", subjects=["edge.>"], allow_atomic=True)),
                             timeout=30, what="the leaf's stream, made from the hub")
            js = at_hub.jetstream()
            await js.add_stream(StreamConfig(name="EDGE", subjects=["hub_edge.>"], allow_atomic=True))  # the hub's own
            await js.add_stream(StreamConfig(name="HUB_EDGE", sources=[StreamSource(
                name="EDGE", external=ExternalStream(api="$JS.leaf1.API"))]))
            await js.add_consumer("HUB_EDGE", durable_name="reader")

        def findings(*more: str) -> list[tuple[str, str, str]]:
            done = subprocess.run([CLI, "check", "--server", hub.url, "--data-dir", str(tmp_path / "data"),
                                   "--format", "json", "--code", "BATCH_026", *more],
                                  capture_output=True, text=True, timeout=120)
            return [(f["stream"], f["severity"], f["evidence"]) for f in json.loads(done.stdout)["findings"]]

        [(stream, severity, evidence)] = findings("--domain", "leaf1")
        assert (stream, severity) == ("HUB_EDGE", "warning")
        assert "sources EDGE of JetStream domain leaf1, which allows atomic batches" in evidence
        assert "a consumer of this copy can read half a batch" in evidence
        [(stream, severity, evidence)] = findings()  # the domain not named: said, not guessed
        assert (stream, severity) == ("HUB_EDGE", "info") and "name the domain (--domain leaf1" in evidence


async def test_canary_batches_go_through_a_leafs_domain_from_the_hub_and_its_streams_go_after(tmp_path):
    """`canary --once --domain leaf1` through the hub: an atomic and a fast batch through the hub's server
    and through the leaf's, each result naming the leaf's domain; the canary streams it made in the leaf's
    domain are gone after; a name that is not a domain's runs nothing."""
    with hub_and_leaf(tmp_path, "edge-a") as hub:
        async with await nats.connect(hub.url) as at_hub:
            leaf_js = at_hub.jetstream(domain="leaf1")
            await eventually(lambda: leaf_js.account_info(), timeout=30, what="the leaf's domain through the hub")

            def canary(*more: str) -> subprocess.CompletedProcess:
                return subprocess.run([CLI, "canary", "--once", "--server", hub.url, "--data-dir", str(tmp_path / "data"),
                                       "--format", "json", *more], capture_output=True, text=True, timeout=120)

            done = canary("--domain", "leaf1")
            assert done.returncode == 0, (done.stdout, done.stderr)
            results = [json.loads(line) for line in done.stdout.splitlines()]
            assert sorted((r["node"], r["domain"], r["kind"]) for r in results) == [
                ("edge-a", "leaf1", "atomic"), ("edge-a", "leaf1", "fast"), ("hub", None, "atomic"), ("hub", None, "fast")]
            assert all(r["commit_ms"] is not None and r["lost"] == 0 and r["error"] is None for r in results), results
            assert [s async for s in _names(leaf_js)] == []  # the leaf's canary streams deleted after
            for hostile in ("a.b", "x" * 65, "leaf\x1b[2J", ""):
                refused = canary("--domain", hostile)
                assert refused.returncode == 2 and "--domain" in refused.stderr and refused.stdout == "", refused


@contextmanager
def hub_and_leaf(tmp_path, leaf_server: str):
    """A hub (domain hub) and one leaf node of it (domain leaf1, its server named `leaf_server`): the hub."""
    port = free_port()
    with EmbeddedServer(tmp_path / "hub", batch_limits=TEST_LIMITS, jetstream_config='domain: "hub"',
                        extra_config=f'server_name: "hub"\nleafnodes {{ listen: "127.0.0.1:{port}" }}\n') as hub, \
            EmbeddedServer(tmp_path / "leaf", batch_limits=TEST_LIMITS, jetstream_config='domain: "leaf1"',
                           extra_config=LEAF_CONFIG.format(name=leaf_server, port=port)):
        yield hub


async def _names(js):
    for name in await js.streams_info():
        yield name.config.name


async def test_a_leafs_batch_followed_into_the_hubs_copies_is_said_where_it_arrived_split(tmp_path):
    """The hub sources the leaf's atomic stream twice: whole, and filtered to edge.a. A batch on edge.a
    alone arrives whole in both (nothing said); a batch over edge.a and edge.b arrives as 2 of its 3
    messages in the filtered copy: one copy_split event in the hub's log, naming the copy and the domain."""
    with hub_and_leaf(tmp_path, "leaf1") as hub:
        async with await nats.connect(hub.url) as at_hub:
            leaf_js, js = at_hub.jetstream(domain="leaf1"), at_hub.jetstream()
            await eventually(lambda: leaf_js.add_stream(StreamConfig(name="EDGE", subjects=["edge.>"], allow_atomic=True)),
                             timeout=30, what="the leaf's stream, made from the hub")
            for name, only in (("HUB_ALL", None), ("HUB_A", "edge.a")):
                await js.add_stream(StreamConfig(name=name, sources=[StreamSource(
                    name="EDGE", filter_subject=only, external=ExternalStream(api="$JS.leaf1.API"))]))
            log = open(tmp_path / "collector.log", "w")
            collector = subprocess.Popen([CLI, "collect", "--server", hub.url, "--data-dir", str(tmp_path / "data"),
                                          "--batch-timeout", "1", "--domain", "leaf1"], stdout=log, stderr=subprocess.STDOUT)
            try:
                wait_collecting(collector, tmp_path / "collector.log")

                async def followed() -> list[int]:
                    return [(await leaf_js.stream_info("EDGE")).state.consumer_count,
                            *[(await js.stream_info(name)).state.consumer_count for name in ("HUB_ALL", "HUB_A")]]

                await eventually(followed, lambda counts: all(counts), timeout=60, what="the collector reading both sides")
                for batch_id, subjects in (("whole-one", ["edge.a"] * 3), ("split-one", ["edge.a", "edge.b", "edge.a"])):
                    batch = AtomicBatch(at_hub, batch_id=batch_id)
                    for subject in subjects[:-1]:
                        await batch.add(subject, b"m")
                    await batch.commit(subjects[-1], b"end")
                events = EventLog.over(at_hub, Settings(data=DataSettings(data_dir=tmp_path / "data")).keyed_event_log(
                    make=False))

                async def splits() -> list:
                    return [e for _, e in await events.read(1, idle_timeout=0.5) if e.kind is EventKind.COPY_SPLIT]

                [split] = await eventually(splits, bool, timeout=60, every=0.5, what="the split copy in the hub's log")
            finally:
                collector.terminate()
                collector.wait(timeout=60)
    assert (split.stream, split.batch_id, split.domain, split.reason, split.count, split.lost) == \
        ("HUB_A", "split-one", "leaf1", "partial", 2, 1), split
    assert "2 of its 3 message(s) in HUB_A" in split.detail and "committed whole on EDGE" in split.detail
    model = LiveModel()
    model.apply(split)
    assert "batch split-one copied split: 2 of its 3" in notices_html(model) and model.newest_first(10) == []


async def test_a_leafs_consumers_are_listed_with_its_domain_and_changed_through_the_hub(tmp_path):
    """The leaf's domain named (--domain leaf1): its streams' consumers are read beside the hub's, each row
    naming the domain (a stream of the same name at the hub kept apart), and a pause reaches the leaf's
    consumer, not the hub's of the same name, from the CLI as from a command."""
    with hub_and_leaf(tmp_path, "leaf1") as hub:
        async with await nats.connect(hub.url) as at_hub:
            leaf_js, js = at_hub.jetstream(domain="leaf1"), at_hub.jetstream()
            await eventually(lambda: leaf_js.add_stream(StreamConfig(name="EDGE", subjects=["edge.>"])),
                             timeout=30, what="the leaf's stream, made from the hub")
            await js.add_stream(StreamConfig(name="EDGE", subjects=["hub_edge.>"]))
            for i in range(5):
                await leaf_js.publish("edge.x", b"%d" % i)
            await leaf_js.add_consumer("EDGE", durable_name="reader")
            await js.add_consumer("EDGE", durable_name="reader")

            def cli(*args: str) -> subprocess.CompletedProcess:
                return subprocess.run([CLI, "consumers", *args, "--server", hub.url, "--data-dir", str(tmp_path / "data")],
                                      capture_output=True, text=True, timeout=120)

            listed = cli("list", "--domain", "leaf1", "--format", "json")
            assert listed.returncode == 0, listed.stderr
            rows = {(r["domain"], r["stream"], r["consumer"]): r["pending"] for r in json.loads(listed.stdout)}
            assert rows == {(None, "EDGE", "reader"): 0, ("leaf1", "EDGE", "reader"): 5}
            alone = json.loads(cli("list", "--format", "json").stdout)  # not named: the hub's only
            assert [(r["domain"], r["stream"]) for r in alone] == [(None, "EDGE")]

            paused = cli("pause", "EDGE", "reader", "--for", "5m", "--in-domain", "leaf1")
            assert paused.returncode == 0 and "leaf1:EDGE/reader" in paused.stdout, paused.stderr
            assert (await leaf_js.consumer_info("EDGE", "reader")).config.pause_until is not None
            assert (await js.consumer_info("EDGE", "reader")).config.pause_until is None
            refused = cli("resume", "EDGE", "reader", "--in-domain", "leaf1.>")
            assert refused.returncode != 0 and "domain" in refused.stderr
