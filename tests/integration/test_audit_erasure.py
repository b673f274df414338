"""An audit trail that cannot be erased quietly, against a real nats-server: the console makes its stream
with deletes and purges denied (and sets an existing one so); a fresh console's empty trail verifies;
a deleted stream, a truncation by max_msgs and, on a trail the console could not make safe, a purge
(keeping one record or none) are each found against the head kept in the data directory's SQLite, by
`audit --verify` (exit 1) and the Audit page's line, and stay found after new records. A trail that
cannot take a record refuses the action: with it sealed, an ack, a stream edit, a search and an export
change nothing."""

from __future__ import annotations

import subprocess

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from console.broker.audit_log import STREAM, SUBJECT
from console.commands import ExportTable, RunProbe, RunSearch
from console.config import event_key
from console.domain.audit import Actor
from console.domain.messages import Ack
from console.domain.search import SearchQuery
from console.errors import AuditRefused
from console.runtime import Runtime
from console.ui.audit import chain_text
from console.ui.replay import ReplayPage
from console.ui.streams import StreamsPage
from tests.integration.test_audit import cli_audit, settings_for
from tests.commands import doing
from tests.processes import CLI
from tests.waits import eventually


@pytest.fixture
async def console(server, tmp_path):
    """A console on a fresh data directory and a trail stream no one has written yet."""
    event_key(data_dir=tmp_path)
    runtime = await Runtime.open(settings_for(server.url, tmp_path))
    js = runtime.nc.jetstream()
    try:
        await js.delete_stream(STREAM)  # stream deletion is never denied, not even of a sealed one: only its records'
    except Exception:
        pass
    yield runtime
    await runtime.close()


async def write(console: Runtime, count: int) -> None:
    for i in range(count):
        await console.actions(Actor("ann")).run(doing(RunProbe, f"S{i} atomic x1"))


async def test_a_fresh_consoles_empty_trail_verifies(console):
    done = cli_audit(console, "--verify")
    assert done.returncode == 0, done.stderr
    assert "chain intact" in done.stderr and "BROKEN" not in done.stderr
    assert (await console.audit.read()).intact


async def test_the_trail_denies_deletes_and_purges_and_an_existing_one_is_made_so(console):
    js = console.nc.jetstream()
    await js.add_stream(StreamConfig(name=STREAM, subjects=[SUBJECT], max_age=3600))  # as an older console made it
    await write(console, 2)
    config = (await js.stream_info(STREAM)).config
    assert config.deny_delete and config.deny_purge and not config.max_age
    with pytest.raises(Exception, match="purge not permitted"):
        await js.purge_stream(STREAM)
    with pytest.raises(Exception, match="delete not permitted"):
        await js.delete_msg(STREAM, 1)
    assert (await console.audit.read()).intact


async def test_a_deleted_trail_is_found_erased_and_stays_found_after_new_records(console):
    await write(console, 3)  # 6 records: each attempt and its outcome
    await console.nc.jetstream().delete_stream(STREAM)
    broken = cli_audit(console, "--verify")
    assert broken.returncode == 1
    assert "6 record(s) erased after record 0" in broken.stderr, broken.stderr
    await write(console, 4)  # the stream made again: 8 new records, past the old head at 6
    again = cli_audit(console, "--verify")
    assert again.returncode == 1 and "6 record(s) erased after record 0" in again.stderr, again.stderr
    line = chain_text(await console.audit.read())
    assert "CHAIN BROKEN" in line and "erased after record 0" in line


async def test_a_truncation_by_max_msgs_is_found(console):
    await write(console, 3)
    js = console.nc.jetstream()
    config = (await js.stream_info(STREAM)).config
    config.max_msgs = 1  # any client of the account that may update streams
    await js.update_stream(config)
    broken = cli_audit(console, "--verify")
    assert broken.returncode == 1
    assert "records 1..5 were erased" in broken.stderr, broken.stderr
    assert "CHAIN BROKEN" in chain_text(await console.audit.read())


@pytest.mark.parametrize("keep", [1, 0])
async def test_a_purge_of_a_trail_that_could_not_be_made_safe_is_found(console, keep):
    """As on an account whose console user may not update streams: the console says it is unsafe."""
    js = console.nc.jetstream()
    # a trail without the denials... (made again at once after the fixture's delete, a loaded server may
    # answer 10049 "error creating store" while it still removes the old one's files: asked again)
    await eventually(lambda: js.add_stream(StreamConfig(name=STREAM, subjects=[SUBJECT])), what="the trail made")
    trail = console.audit.log()
    trail._ensured, trail.unsafe = True, "deny_purge=False (made so by this test)"  # ...the console could not change
    await write(console, 3)  # 6 records, the head at 6
    await js.purge_stream(STREAM, keep=keep) if keep else await js.purge_stream(STREAM)
    checked = await console.audit.read()
    erased = [why for _, why in checked.breaks]
    assert erased == [f"records 1..{5 if keep else 6} were erased (the trail keeps its newest 100,000)"], erased
    assert "UNSAFE" in chain_text(checked)
    await write(console, 1)  # new records never make it read clean
    assert f"records 1..{5 if keep else 6} were erased" in cli_audit(console, "--verify").stderr


async def seeded_stream(console: Runtime, name: str) -> None:
    js = console.nc.jetstream()
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
    for i in range(3):
        await js.publish(f"{name.lower()}.x", b'{"n": %d}' % i)
    await js.add_consumer(name, ConsumerConfig(durable_name="ops", ack_policy=AckPolicy.EXPLICIT, ack_wait=60))


async def test_a_sealed_trail_refuses_every_action_and_nothing_changes(console):
    await seeded_stream(console, "SEALED_T")
    actions = console.actions(Actor("ann"))
    replay = ReplayPage(admin=console.admin, actions=actions, payloads=console.payloads(actions.payloads),
                        stream="SEALED_T", consumer="ops", max_messages=1)
    await replay.reload()
    replay.consumer = "ops"
    fetched = await replay.fetch()
    assert fetched is not None and len(fetched.messages) == 1
    js = console.nc.jetstream()
    config = (await js.stream_info(STREAM)).config
    config.sealed = True  # any client of the account that may update streams
    await js.update_stream(config)
    pending = (await js.consumer_info("SEALED_T", "ops")).num_ack_pending

    done, said = await replay.act(Ack.ACK, fetched.messages[0])
    assert not done and "audit trail cannot record it" in said
    assert (await js.consumer_info("SEALED_T", "ops")).num_ack_pending == pending == 1

    streams = StreamsPage(admin=console.admin, actions=actions)
    await streams.reload()
    streams.stream = "SEALED_T"
    streams.allow_batched = True
    assert await streams.apply() is None and "audit trail cannot record it" in streams.result
    assert not (await js.stream_info("SEALED_T")).config.allow_batched

    with pytest.raises(AuditRefused):
        await actions.run(RunSearch(SearchQuery("SEALED_T")))
    assert (await js.stream_info("SEALED_T")).state.consumer_count == 1  # no search consumer was made
    with pytest.raises(AuditRefused):  # a download is refused
        await actions.run(ExportTable("abandoned_batches", "2026-11-26..2026-11-26", "csv", [], []))
    done = subprocess.run([CLI, "search", "SEALED_T", "--server", console.settings.connection.servers[0],
                           "--data-dir", str(console.settings.data.data_dir), "--events-stream",
                           console.settings.event_log.stream], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "audit trail cannot record it" in done.stderr, done.stderr
    assert done.stdout == ""


async def test_the_collectors_signed_status_witnesses_an_erasure_another_data_directory_cannot_see(console, tmp_path):
    """A console on another machine has no checkpoint of this one's head: the collector's signed status
    carries the head it saw the trail grow to, and keeps it when the trail loses it."""
    import shutil
    from dataclasses import replace

    from console.collector.collector import Collector
    from console.config import CollectorSettings, DataSettings
    from tests.waits import eventually

    collector = Collector(console.nc, CollectorSettings(status_every=0.3, tick_every=0.1), console.event_log)
    await collector.start()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(console.settings.keyed_event_log().key_file or tmp_path / "event.key", elsewhere / "event.key")
    other = Runtime(replace(console.settings, data=DataSettings(data_dir=elsewhere)), console.nc)
    try:
        await write(console, 2)  # 4 records: two attempts, two outcomes
        await eventually(other.audit._witnessed, lambda head: head is not None and head.seq == 4, 15, "a witnessed head")
        assert (await other.audit.read()).intact
        await console.nc.jetstream().delete_stream(STREAM)
        await write(console, 3)  # the trail made again: 6 new records, past the head the collector saw
        checked = await eventually(other.audit.read, lambda c: not c.intact, 15, "the erasure found")
        assert any("the collector's signed status saw record 4" in why for _, why in checked.breaks), checked.breaks
    finally:
        await collector.stop()
