"""A well-formed batch_abandoned advisory with a reason this console does not know (a newer server's)
is a loss all the same: recorded as itself, on Live, in History after a run, in the metrics, and in the
shipped rules' catch-all. And History keeps who published a fast loss."""

import asyncio
import secrets
from datetime import datetime, timedelta, timezone

import nats
from sqlmodel import Session, select

from console.alerting.metrics import Metrics
from console.alerting.rules_file import DEFAULT_RULES
from console.analytics.job import JobSettings, run_once
from console.analytics.source import SourceOptions
from console.broker.eventlog import EventLog
from console.collector.collector import Collector
from console.config import CollectorSettings, EventLogSettings
from console.domain.alert_rules import parse_rules
from console.domain.alerting import Evaluator
from console.domain.events import BatchEvent, EventKind
from console.domain.live_model import LiveModel
from console.domain.publisher import Publisher
from console.storage import sqlite
from console.storage.tables import AbandonedBatch, AbandonmentHourly
from tests.waits import events_for

KEY = b"new-reason-key-" + secrets.token_hex(8).encode()


async def test_a_reason_the_console_does_not_know_is_recorded_shown_kept_and_alerted(spark, server, client, tmp_path):
    conn = await nats.connect(server.url)
    collector = Collector(conn, CollectorSettings(tick_every=0.1), EventLogSettings(key=KEY))
    await collector.start()
    now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    body = ('{"type":"io.nats.jetstream.advisory.v1.stream_batch_abandoned","id":"newReason0000000001",'
            f'"timestamp":"{now}","stream":"NEWREASON","batch":"brand-new-1","reason":"brand_new"}}')
    try:
        await client.publish("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.NEWREASON", body.encode())
        [event] = await events_for(client, {"brand-new-1"}, lambda es: len(es) >= 1)
    finally:
        await collector.stop()
        await conn.close()
    assert (event.reason, event.stream) == ("brand_new", "NEWREASON")
    assert (await collector.status()).quarantined == 0  # a loss, not malformed input

    live = LiveModel()
    live.apply(event)
    assert live.counts_by_reason(datetime.now(timezone.utc), timedelta(hours=1))["brand_new"] == 1
    assert [b.reason for b in live.newest_first(10)] == ["brand_new"]

    metrics, evaluator = Metrics(), Evaluator(parse_rules(DEFAULT_RULES.read_text()))
    metrics.observe(event)
    evaluator.apply(event)
    assert ('NEWREASON', 'atomic', 'brand_new') in metrics.lost_batches.samples
    firing = evaluator.evaluate(datetime.now(timezone.utc) + timedelta(seconds=1))
    assert [n.rule for n in firing] == ["batch lost for a reason this console does not know"]

    # A fast loss the collector could name the publisher of: History keeps who it was.
    publisher = Publisher(name="orders-writer", lang="python3", version="2.16.0", account="APP", user="app",
                          address="127.0.0.1:5000", server="n1", cid=7)
    ended = BatchEvent("fi.named-1.ended", EventKind.FAST_ENDED_EARLY, datetime.now(timezone.utc), "NEWREASON",
                       "named-1", reason="gap", gap_mode="fail", count=9, publisher=publisher)
    assert (await EventLog(client.jetstream(), EventLogSettings(key=KEY)).append([ended])).stored == 1
    settings = JobSettings(tmp_path, source=SourceOptions.parse({"servers": server.url, "event_secret": KEY.decode()}))
    await asyncio.to_thread(run_once, lambda: spark, settings)
    with Session(sqlite.open_db(settings.db_path)) as s:
        assert sorted((r.batch_id, r.reason, r.publisher) for r in s.exec(select(AbandonedBatch)).all()
                      if r.stream == "NEWREASON") == [("brand-new-1", "brand_new", None),
                                                      ("named-1", "gap", publisher.line())]
        assert sorted((r.reason, r.batches) for r in s.exec(select(AbandonmentHourly)).all()
                      if r.stream == "NEWREASON") == [("brand_new", 1), ("gap", 1)]
