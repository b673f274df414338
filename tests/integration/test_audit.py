"""Actions and the audit trail against a real nats-server: every action from the registry leaves one
record, read-only refusals and the server's refusals included; the chain finds a removed or forged
record, in the CLI's --verify as on the page's line."""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import nats.js.errors
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from console.commands import ANSWERS, EditStream, ExportTable, RunProbe
from console.commands import COMMANDS as ACTIONS
from console.broker.eventlog import EventLog
from console.broker.audit_log import STREAM, SUBJECT
from console.config import DataSettings, EventLogSettings, Settings, WebSettings, event_key
from console.domain.audit import NOTEBOOK, Actor
from console.domain.events import BatchEvent, EventKind
from console.domain.kept_messages import KeptMessage
from console.domain.messages import Ack
from console.domain.signing import SIGNATURE
from console.errors import ReadOnlyError
from console.runtime import Runtime
from console.ui.audit import chain_text
from console.ui.streams import StreamsPage
from console.widgets import NotebookConsole
from tests.commands import doing
from tests.processes import CLI
from tests.waits import eventually

RULE = '[[rule]]\nname = "orders"\nwhen = "lost_batches"\nat_least = 1\nwithin = "5m"\n'


def outcomes(checked) -> list:
    """The records that say how an attempt ended (each taken action's attempt, written ahead, left out)."""
    return [r for _, r in checked.records if r.outcome != "attempted"]


def settings_for(url: str, data_dir: Path, read_only: bool = False) -> Settings:
    base = Settings()
    return replace(base, connection=replace(base.connection, servers=(url,)),
                   data=DataSettings(data_dir=data_dir),
                   web=WebSettings(read_only=read_only, restart_command="echo not restarted; exit 3"),
                   event_log=EventLogSettings(stream=f"EV_{data_dir.name[-8:].upper()}"))


@pytest.fixture
async def consoles(server, tmp_path):
    """A console and a read-only one on the same data directory (one key, one trail), and a clean trail."""
    event_key(data_dir=tmp_path)
    opened = [await Runtime.open(settings_for(server.url, tmp_path, read_only)) for read_only in (False, True)]
    try:
        await opened[0].nc.jetstream().delete_stream(STREAM)
    except Exception:
        pass
    yield opened
    for runtime in opened:
        await runtime.close()


async def test_every_action_in_the_registry_leaves_one_record_with_its_user_and_outcome(consoles):
    console, read_only = consoles
    for name, action in ACTIONS.items():
        await console.actions(Actor("ann", "10.1.2.3", "ua")).run(doing(name))
        if action.changes_server:
            with pytest.raises(ReadOnlyError):
                await read_only.actions(NOTEBOOK).run(doing(name))
        else:
            await read_only.actions(NOTEBOOK).run(doing(name))
    checked = await console.audit.read()
    assert checked.intact
    every = [(r.action, r.actor.user, r.outcome) for _, r in checked.records]
    for i, (action, user, outcome) in enumerate(every):  # written ahead: each taken action's attempt comes first
        if outcome == "accepted":
            assert every[i - 1] == (action, user, "attempted")
    mine = [record for record in every if record[2] != "attempted"]
    expected = []
    for name, action in ACTIONS.items():
        expected.append((name, "ann", "accepted"))
        expected.append((name, "notebook", "refused: read-only" if action.changes_server else "accepted"))
    assert mine == expected
    assert all(r.actor.address == "10.1.2.3" for _, r in checked.records if r.actor.user == "ann")


async def test_a_stream_edit_is_recorded_with_its_diff_and_a_refusal_with_the_servers_code(consoles):
    console, _ = consoles
    name = "AUDITED"
    await console.nc.jetstream().add_stream(StreamConfig(name=name, subjects=["audited.>"], persist_mode="async"))
    page = StreamsPage(admin=console.admin, actions=console.actions(Actor("ann")))
    await page.reload()
    page.stream = name
    page.allow_batched = True
    applied = await page.apply()
    assert applied is not None, page.result
    assert applied.allow_batched
    page.allow_atomic = True  # async persist mode and atomic: the server refuses (10052)
    assert await page.apply() is None and "10052" in page.result
    records = outcomes(await console.audit.read())
    assert [(r.action, r.target, r.outcome, r.diff) for r in records] == [
        ("stream.edit", name, "accepted", {"allow_batched": [False, True]}),
        ("stream.edit", name, "refused: server", {"allow_atomic": [False, True]})]
    assert "10052" in records[1].detail and "async persist mode" in records[1].detail


async def test_alert_rules_changed_directly_on_the_view_are_actions_too(consoles):
    console, read_only = consoles
    assert await console.alerts.save_rule(RULE) == "orders"
    await console.alerts.set_muted("orders", True)
    with pytest.raises(ReadOnlyError):
        await read_only.alerts.save_rule(RULE)
    with pytest.raises(ReadOnlyError):
        await read_only.alerts.set_muted("orders", False)
    records = [(r.action, r.target, r.actor.user, r.outcome) for r in outcomes(await console.audit.read())]
    assert records == [("alert_rule.save", "orders", "notebook", "accepted"),
                       ("alert_rule.mute", "orders", "notebook", "accepted"),
                       ("alert_rule.save", "orders", "notebook", "refused: read-only"),
                       ("alert_rule.unmute", "orders", "notebook", "refused: read-only")]
    assert [r.muted for r in console.alerts.rules()[0] if r.name == "orders"] == [True]  # the refused unmute changed nothing


async def test_two_writers_at_once_keep_one_chain(consoles, tmp_path):
    console, _ = consoles
    other = await Runtime.open(settings_for(console.settings.connection.servers[0], tmp_path))
    try:
        writers = [console.actions(Actor("a")), other.actions(Actor("b"))]
        await asyncio.gather(*(writers[i % 2].run(doing(ExportTable, f"t{i}")) for i in range(30)))
    finally:
        await other.close()
    checked = await console.audit.read()
    assert checked.intact and len(outcomes(checked)) == 30 and len(checked.records) == 60


async def test_reads_while_two_processes_write_never_find_an_erasure(consoles):
    """Two writers on one data directory (one checkpoint, as the web process and a notebook share it) and
    a reader: a record written between a read of the stream and a read of the checkpoint was once said
    erased, and the erasure kept for good. Every read here holds, and so does the trail after."""
    console, read_only = consoles
    writing = asyncio.gather(*(console.actions(Actor("a")).run(doing(ExportTable, f"t{i}")) for i in range(25)),
                             *(_refused(read_only, i) for i in range(25)))
    breaks = []
    while not writing.done():
        breaks += (await console.audit.read()).breaks
    await writing
    checked = await console.audit.read()
    assert breaks == [] and checked.intact, breaks + checked.breaks
    assert len(checked.records) == 75  # 25 attempts and their outcomes, 25 refusals


async def _refused(runtime: Runtime, i: int) -> None:
    with pytest.raises(ReadOnlyError):
        await runtime.actions(Actor("b")).run(doing(EditStream, f"S{i}"))


def cli_audit(console: Runtime, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "audit", "--server", console.settings.connection.servers[0], "--data-dir",
                           str(console.settings.data.data_dir), "--events-stream", console.settings.event_log.stream,
                           *args], capture_output=True, text=True, timeout=60)


async def test_a_removed_or_forged_record_breaks_the_chain_for_verify_and_the_page(consoles):
    console, _ = consoles
    for i in range(5):
        await console.actions(Actor("ann")).run(doing(RunProbe, f"S{i} atomic x1"))
    intact = cli_audit(console, "--verify")
    assert intact.returncode == 0, intact.stderr
    assert intact.stdout.count("probe.run") == 10 and intact.stdout.count(" accepted") == 5  # each written ahead
    assert "chain intact" in intact.stderr

    js = console.nc.jetstream()
    with pytest.raises(nats.js.errors.APIError, match="message delete not permitted"):  # the stream denies it
        await js.delete_msg(STREAM, 3)
    await js.publish(SUBJECT, b'{"forged": true}', headers={SIGNATURE: "0" * 64})
    broken = cli_audit(console, "--verify")
    assert broken.returncode == 1
    assert "BROKEN at record 11: altered or not the console's" in broken.stderr
    assert "CHAIN BROKEN" in chain_text(await console.audit.read())
    assert cli_audit(console).returncode == 0  # without --verify it lists and says, and does not fail


def test_audit_since_refuses_what_is_not_a_duration(tmp_path):
    done = subprocess.run([CLI, "audit", "--since", "\x1b[31m5 parsecs", "--server", "nats://127.0.0.1:1",
                           "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "duration" in done.stderr and "\x1b" not in done.stderr


async def seeded(console: Runtime, stream: str) -> None:
    """A stream of 4 messages with a durable `ops`, and a signed abandonment of batch nb-1 in the event log."""
    js = console.nc.jetstream()
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream.lower()}.>"], allow_atomic=True))
    for i in range(4):
        await js.publish(f"{stream.lower()}.x", f'{{"n": {i}}}'.encode())
    await js.add_consumer(stream, ConsumerConfig(durable_name="ops", ack_policy=AckPolicy.EXPLICIT, ack_wait=60))
    log = EventLog.over(console.nc, console.event_log)
    await log.ensure()
    kept = {place: KeptMessage(place, seq, f"{stream.lower()}.kept", (), b'{"kept": %d}' % seq, 11).to_dict()
            for place, seq in (("first", 1), ("last", 2))}  # the publish side's: the whole batch, as it was sent
    await log.append([BatchEvent("nb-1-abandoned", EventKind.ATOMIC_ABANDONED, datetime.now(timezone.utc),
                                 stream=stream, batch_id="nb-1", reason="timeout"),
                      BatchEvent("nb-1-kept", EventKind.BATCH_MESSAGES, datetime.now(timezone.utc), stream=stream,
                                 batch_id="nb-1", detail=json.dumps(kept))])


async def take_every_action(notebook: NotebookConsole, stream: str) -> dict[str, str]:
    """Each action of the registry through the notebook's pages; the start of the target each one's record names."""
    streams = await notebook.streams()
    streams.stream = stream  # the form is filled from the server: propose the opposite
    streams.allow_batched = not streams.allow_batched
    await streams.apply()
    probe = await notebook.page("/probe", stream=f"{stream}_P", subject=f"{stream.lower()}_p", count=3)
    await probe.start()
    canary = await notebook.page("/canary")
    await canary.run_now()
    node = (await notebook.page("/maintenance")).nodes  # the one server's name
    maintenance = await notebook.page("/maintenance", node=(await node())[0])
    await maintenance.run_drain()
    restarted = await maintenance.run_restart()  # the command the console was started with: it fails, said
    assert restarted is None or "the command failed with exit code 3" in maintenance.status, maintenance.status
    replay = await notebook.replay(stream)
    replay.consumer, replay.max_messages = "ops", 4
    fetched = await replay.fetch()
    if fetched is None:  # refused (read-only): a peek's messages, to ask for each answer all the same
        replay.consumer = ""
        fetched = await replay.fetch()
    assert fetched is not None and len(fetched.messages) == 4, replay.status
    for kind, message in zip(Ack, fetched.messages):
        await replay.act(kind, message)
    pinned = {"durable_name": "pinned", "ack_policy": "explicit", "priority_groups": ["jobs"],
              "priority_policy": "pinned_client"}  # made again for the read-only pass: the first deleted it
    await notebook.runtime.nc.request(f"$JS.API.CONSUMER.CREATE.{stream}.pinned",
                                      json.dumps({"stream_name": stream, "config": pinned}).encode(), timeout=5)
    consumers = await notebook.page("/consumers", stream=stream)
    consumers.chosen, consumers.reset_seq, consumers.group = f"{stream}/pinned", 1, "jobs"
    for change in ("pause", "resume", "reset", "unpin", "delete", "delete"):  # a delete is asked twice
        await consumers.act(change)
    alerts = await notebook.alerts()
    alerts.rule_text = RULE
    await alerts.save()
    alerts.rule = "orders"
    await alerts.set_muted(True)
    await alerts.set_muted(False)
    await notebook.history().download()
    await notebook.caught_up()  # the batch is on Live: where Incident finds it first
    incident = await notebook.incident("nb-1")
    assert incident.incident is not None
    await incident.report()
    await incident.republish()  # its two kept messages were the whole batch: a new atomic batch
    page = await notebook.page("/stream", stream=stream)
    page.publishing.subject, page.publishing.payload, page.publishing.headers = f"{stream.lower()}.x", "{}", "X-By: nb"
    await page.publishing.act("publish")
    page.publishing.first, page.publishing.last, page.publishing.to_subject = 1, 1, f"{stream.lower()}.again"
    await page.publishing.act("republish")
    search = await notebook.page("/search", stream=stream, max_matches=2)
    assert len(search.results) == 2, search.state
    search.export_format = "jsonl"
    await search.download()
    return {"stream.edit": stream, "probe.run": f"{stream}_P atomic x3", "consumer.fetch": f"{stream}/ops",
            "canary.run": "default once x10", "maintain.drain": "", "maintain.restart": "",
            **{ANSWERS[kind].name: f"{stream}/" for kind in Ack},
            "alert_rule.save": "orders", "alert_rule.mute": "orders", "alert_rule.unmute": "orders",
            "export.csv": "abandoned_batches", "export.report": "nb-1", "search.run": stream,
            "export.search": f"{stream} jsonl 2 matches", "consumer.pause": f"{stream}/pinned until",
            "consumer.resume": f"{stream}/pinned", "consumer.reset": f"{stream}/pinned to seq 1",
            "consumer.unpin": f"{stream}/pinned group jobs", "consumer.delete": f"{stream}/pinned",
            "batch.republish": f"{stream} batch nb-1 (2 kept", "message.publish": f"{stream} {stream.lower()}.x (2 bytes",
            "message.republish": f"{stream} seq 1-1 to {stream} {stream.lower()}.again"}


async def test_every_action_from_a_notebook_leaves_one_record_and_on_a_read_only_one_is_refused_and_recorded(
        consoles):
    console, read_only = consoles
    await seeded(console, "NB_ACT")
    for runtime in (console, read_only):
        before = len(outcomes(await console.audit.read()))
        targets = await take_every_action(NotebookConsole(runtime), "NB_ACT")
        assert set(targets) == set(ACTIONS), "an action of the registry this test does not take"
        checked = await eventually(console.audit.read, lambda c: len(outcomes(c)) >= before + len(ACTIONS),
                                   what="a record of every action")
        records = outcomes(checked)[before:]
        assert sorted(r.action for r in records) == sorted(ACTIONS)  # one each, no more
        for r in records:
            refused = runtime is read_only and ACTIONS[r.action].changes_server
            assert (r.actor.user, r.outcome) == ("notebook", "refused: read-only" if refused else "accepted"), r
            assert r.target.startswith(targets[r.action]), (r.action, r.target)
