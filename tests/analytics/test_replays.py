"""A signed record of the event log copied and stored again (under a new message id, or under its own
after the log's duplicate window) is a replay: every reader counts the event once and goes on."""

import asyncio
import secrets
from datetime import datetime, timedelta, timezone

from nats.js.api import ConsumerConfig, DeliverPolicy
from sqlmodel import Session, select

from console.alerting.metrics import Metrics
from console.analytics.job import JobSettings, run_once
from console.analytics.source import SourceOptions
from console.broker.eventlog import EventLog
from console.config import EventLogSettings
from console.domain.alert_rules import parse_rules
from console.domain.alerting import Evaluator
from console.domain.events import MSG_ID
from console.storage import sqlite
from console.storage.tables import AbandonedBatch, AbandonmentHourly, GapHourly
from tests.waits import eventually

KEY = b"replay-test-key-" + secrets.token_hex(8).encode()
THREE_LOSSES = """
[[rule]]
name = "three losses"
when = "lost_batches"
at_least = 3
within = "1h"
"""


async def _records(js, kinds: tuple[str, ...]) -> dict[str, object]:
    """The first stored record of each kind, raw (its body and headers as the collector wrote them)."""
    sub = await js.subscribe("batch_console.events.>", ordered_consumer=True,
                             config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL))
    found = {}
    try:
        while len(found) < len(kinds):
            msg = await sub.next_msg(timeout=5)
            kind = msg.subject.split(".")[2]
            if kind in kinds and kind not in found:
                found[kind] = msg
    finally:
        await sub.unsubscribe()
    return found


async def _replay(js, msg, msg_id: str) -> bool:
    """Store a copy of `msg` under `msg_id`; whether the log took it (not dropped as a duplicate)."""
    ack = await js.publish(msg.subject, msg.data, headers={**msg.headers, MSG_ID: msg_id})
    return not ack.duplicate


def _totals(engine) -> dict:
    with Session(engine) as s:
        return {"atomic": sum(r.batches for r in s.exec(select(AbandonmentHourly)).all() if r.kind == "atomic"),
                "gaps": sum(r.gaps for r in s.exec(select(GapHourly)).all()),
                "lost": sum(r.lost for r in s.exec(select(GapHourly)).all()),
                "abandoned": len(s.exec(select(AbandonedBatch)).all())}


async def test_twenty_replays_of_signed_records_count_once_in_every_reader(spark, server, client, produce, tmp_path):
    await produce(["replayed"], fast=[("ok", 2)], key=KEY)
    js = client.jetstream()
    originals = await _records(js, ("atomic_abandoned", "fast_gap"))
    settings = JobSettings(tmp_path, source=SourceOptions.parse({"servers": server.url, "event_secret": KEY.decode()}))
    engine = sqlite.open_db(settings.db_path)
    first = await asyncio.to_thread(run_once, lambda: spark, settings)
    assert first.events_read > 0
    expected = {"atomic": 1, "gaps": 1, "lost": 2, "abandoned": 1}
    assert _totals(engine) == expected

    # Ten copies of each under new message ids, then ten under their own id once the window has passed.
    for msg in originals.values():
        for _ in range(10):
            assert await _replay(js, msg, secrets.token_hex(8))
    info = await js.stream_info("BATCH_CONSOLE_EVENTS")
    info.config.duplicate_window = 0.1
    await js.update_stream(info.config)
    for msg in originals.values():
        for _ in range(10):
            await eventually(lambda m=msg: _replay(js, m, m.headers[MSG_ID]), timeout=10,
                             what="a copy under its own id stored past the duplicate window")

    second = await asyncio.to_thread(run_once, lambda: spark, settings)
    assert second.note is None and second.last_seq == (await js.stream_info("BATCH_CONSOLE_EVENTS")).state.last_seq
    assert sum(n for reason, n in second.skipped.items() if reason.startswith("replayed")) == 40, second.skipped
    assert _totals(engine) == expected

    await produce(["after"], key=KEY)  # History goes on after the replays
    third = await asyncio.to_thread(run_once, lambda: spark, settings)
    assert third.events_read > 0 and _totals(engine) == {**expected, "atomic": 2, "abandoned": 2}

    # The alerts process's readers: metrics and a rule that needs three losses.
    metrics, evaluator = Metrics(), Evaluator(parse_rules(THREE_LOSSES))
    reader = EventLog(js, EventLogSettings(key=KEY))
    last = await reader.last_seq()
    async for seq, event in reader.follow(1):
        if event is not None:
            metrics.observe(event)
            evaluator.apply(event)
        if seq >= last:
            break
    assert sorted(metrics.lost_batches.samples.values()) == [2.0]  # "replayed" and "after"
    assert list(metrics.gaps.samples.values()) == [1.0] and list(metrics.lost_messages.samples.values()) == [2.0]
    assert evaluator.evaluate(datetime.now(timezone.utc) + timedelta(seconds=1)) == []
    assert reader.skipped["replayed: stored under another message id"] == 20
    assert reader.skipped["replayed: event id read before"] == 20
