"""Loss budgets end to end: three weeks of a stream's life written with back-dated times through the
collector's own writer (its stream totals every hour, fast batches started, messages lost in gaps,
batches dropped), a real Spark run, and each objective's consumption within 1% of the truth in SQLite
and Delta; an objective whose atomic batches nobody counted says its batch rate is not known."""

from __future__ import annotations

import asyncio
import subprocess
from datetime import datetime, timedelta, timezone

import nats
from deltalake import DeltaTable

from console.analytics.job import JobSettings, run_once
from console.analytics.source import SourceOptions
from console.collector.collector import Collector
from console.config import CollectorSettings
from console.domain.budgets import parse_objectives, totals_events
from console.broker.eventlog import EventLog
from console.domain.events import COLLECTOR, BatchEvent, EventKind
from console.storage import sqlite
from console.domain.monthly_report import month_bounds
from console.services.budgets import month_report
from console.storage.budgets import count_rows, status_rows
from console.storage.history import Reader
from tests.processes import CLI
from tests.waits import eventually, events_for

OBJECTIVES_TEXT = '''
[[objective]]
name = "orders"
streams = ["BUD_A"]
lost_messages_per_million = 10
lost_batches_per_thousand = 2

[[objective]]
name = "with atomic"
streams = ["BUD_*"]
lost_batches_per_thousand = 2

[[objective]]
name = "billing's atomic batches"
streams = ["BUD_C"]
publishers = ["billing*"]
lost_messages_per_million = 10
lost_batches_per_thousand = 2

[[objective]]
name = "messages nobody counted"
streams = ["BUD_B"]
lost_messages_per_million = 10

[[objective]]
name = "an uncounted publisher"
streams = ["BUD_C"]
publishers = ["ledger*"]
lost_batches_per_thousand = 2
'''
OBJECTIVES = parse_objectives(OBJECTIVES_TEXT)
HOURS = 21 * 24
PER_HOUR = 10_000
BILLING, LEDGER = "billing (go 1.41)", "ledger (java 2.20)"
DROPS = (10, 200, 400)  # the hours a fast batch is dropped
ATOMIC_PER_HOUR, ATOMIC_SIZE = 6, 50  # billing's atomic batches an hour, and the messages each stores


def three_weeks(now: datetime) -> tuple[list[BatchEvent], dict[str, float]]:
    """The events, and the truth: each objective's share of its budget spent."""
    start = now - timedelta(hours=HOURS)
    events: list[BatchEvent] = []
    for h in range(HOURS + 1):
        t = start + timedelta(hours=h)
        # billing's atomic batches counted since the collector's start (an hour in: the first sample grew from 0)
        events += totals_events("bench", t, {"BUD_A": 1_000 + h * PER_HOUR}, {},
                                {"BUD_C": {BILLING: [(h + 1) * ATOMIC_PER_HOUR, (h + 1) * ATOMIC_PER_HOUR * ATOMIC_SIZE],
                                           "": [h, h * 3]}})
        for i in range(4):
            events.append(BatchEvent(f"st.{h}.{i}", EventKind.FAST_STARTED, t + timedelta(minutes=i), "BUD_A",
                                     f"b{h}x{i}", flow=10))
    lost = [(h, 2) for h in range(0, HOURS, 25)]  # 21 gaps, 42 messages
    for h, n in lost:
        events.append(BatchEvent(f"gap.{h}", EventKind.FAST_GAP, start + timedelta(hours=h, minutes=30), "BUD_A",
                                 f"b{h}x0", gap_mode="ok", seq=5 + n, first_lost_seq=5, lost=n))
    for h in DROPS:
        events.append(BatchEvent(f"drop.{h}", EventKind.FAST_DROPPED, start + timedelta(hours=h, minutes=40),
                                 "BUD_A", f"b{h}x1", inferred=True))
    events.append(BatchEvent("ab.1", EventKind.ATOMIC_ABANDONED, start + timedelta(hours=300), "BUD_B", "atomic-1",
                             reason="timeout"))
    for h, who in ((50, BILLING), (150, BILLING), (260, LEDGER)):  # each publisher's atomic losses
        at = start + timedelta(hours=h, minutes=10)
        events.append(BatchEvent(f"ab.c.{h}", EventKind.ATOMIC_ABANDONED, at, "BUD_C", f"atomic-c-{h}", reason="timeout",
                                 publisher=_publisher(who)))
        if who == BILLING:  # the messages the publish side saw it send, kept beside the loss
            events.append(BatchEvent(f"ab.c.{h}.messages", EventKind.BATCH_MESSAGES, at, "BUD_C", f"atomic-c-{h}",
                                     seq=ATOMIC_SIZE, detail="{}"))
    events.append(BatchEvent("lost.c.250", EventKind.ATOMIC_LOST, start + timedelta(hours=250), "BUD_C", "atomic-c-250",
                             reason="leader_change", seq=20, inferred=True, publisher=_publisher(BILLING)))
    stored = HOURS * PER_HOUR  # the first sample is the baseline
    lost_messages = sum(n for _, n in lost)
    batches = (HOURS + 1) * 4
    billing_batches = (HOURS + 1) * ATOMIC_PER_HOUR
    truth = {"messages": lost_messages / (10 / 1e6 * (stored + lost_messages)), "batches": 3 / (2 / 1e3 * batches),
             "billing": 3 / (2 / 1e3 * billing_batches), "billing stored": billing_batches * ATOMIC_SIZE}
    return events, truth


def _publisher(line: str):
    from console.domain.publisher import Publisher

    name, _, client = line.partition(" (")
    lang, version = client.rstrip(")").split()
    return Publisher(name=name, lang=lang, version=version, user="u", account="APP")


async def test_three_weeks_of_losses_spend_each_budget_as_counted_and_the_month_reports_historys_numbers(
        spark, server, tmp_path):
    nc = await nats.connect(server.url)
    collector = Collector(nc, CollectorSettings(tick_every=0.1, totals_every=0))
    await collector.start()
    try:
        now = datetime.now(timezone.utc).replace(microsecond=0)
        events, truth = three_weeks(now)
        collector.intake.put(events, COLLECTOR)
        await events_for(nc, {"atomic-1"}, lambda es: len(es) == 1, timeout=60)
    finally:
        await collector.stop()
        await nc.close()

    settings = JobSettings(tmp_path, source=SourceOptions.parse({"servers": server.url, "partitions": "2"}),
                           objectives=tuple(OBJECTIVES))
    await asyncio.to_thread(run_once, lambda: spark, settings)
    rows = {(r.objective, r.measure): r for r in status_rows(sqlite.open_db(settings.db_path))}
    messages, batches = rows[("orders", "messages")], rows[("orders", "batches")]
    assert messages.lost == 42 and messages.total == HOURS * PER_HOUR + 42
    assert abs(messages.spent - truth["messages"]) <= 0.01 * truth["messages"]
    assert batches.lost == 3 and abs(batches.spent - truth["batches"]) <= 0.01 * truth["batches"]
    # nothing lost of late: 0 when the last totals' bucket is within 5 minutes of the run, else not known
    assert messages.burn_3d is not None and messages.burn_5m in (0.0, None)
    unknown = rows[("with atomic", "batches")]
    assert unknown.known is False and unknown.spent is None  # BUD_B's atomic batches: nobody counted them
    billing = rows[("billing's atomic batches", "batches")]  # its own atomic batches, from the publish side
    assert billing.lost == 3 and abs(billing.spent - truth["billing"]) <= 0.01 * truth["billing"], billing
    billed = rows[("billing's atomic batches", "messages")]  # every message of its lost batches, as sent
    assert billed.lost == 2 * ATOMIC_SIZE + 20 and billed.total == truth["billing stored"] + billed.lost, billed
    assert billed.known and billed.spent > 0
    unsized = rows[("messages nobody counted", "messages")]  # BUD_B's atomic loss: its messages nobody saw
    assert unsized.known is False and unsized.spent is None
    ledger = rows[("an uncounted publisher", "batches")]
    assert ledger.known is False and ledger.spent is None  # a loss of its, and none of its batches counted
    written = {(r["objective"], r["measure"]): r
               for r in DeltaTable(str(settings.delta("budget_status"))).to_pyarrow_table().to_pylist()}
    assert written[("orders", "messages")]["lost"] == 42 and written[("with atomic", "batches")]["known"] is False

    engine = sqlite.open_db(settings.db_path)
    await _totals_alone(spark, server, now, settings)  # a run of stream totals alone moves the budgets, not History
    after = {(r.objective, r.measure): r for r in status_rows(engine)}
    assert after[("orders", "messages")].total == messages.total + 5_000
    dropped = [now - timedelta(hours=HOURS - h, minutes=-40) for h in DROPS]
    month = dropped[-1].strftime("%Y-%m")  # a month with a drop in it, whatever the day the test runs
    report = month_report(list(OBJECTIVES), engine, month)
    start, end = month_bounds(month)
    drops = sum(start <= t < end for t in dropped)
    history = Reader(engine)
    assert report.lost_batches == int(history.abandonments_by_stream(start, end)["batches"].sum())
    assert report.lost_messages == int(history.gaps_by_hour(start, end)["lost"].sum())
    [orders] = [r for r in report.streams if r["stream"] == "BUD_A"]
    assert orders["fast"] == drops and orders["stored"] == sum(
        r.stored for r in count_rows(engine, start, end) if r.stream == "BUD_A" and r.bucket < end)  # [start, end)
    (tmp_path / "objectives.toml").write_text(OBJECTIVES_TEXT)
    for fmt in ("markdown", "html"):
        done = subprocess.run([CLI, "report", "--month", month, "--format", fmt, "--data-dir", str(tmp_path),
                               "--objectives", str(tmp_path / "objectives.toml")], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"{report.lost_batches:,} batches lost and {report.lost_messages:,} messages lost" in done.stdout
        assert "orders" in done.stdout and ("BUD_A" if fmt == "html" else "BUD\\_A") in done.stdout
    assert "<svg" in done.stdout and "<script" not in done.stdout
    refused = subprocess.run([CLI, "report", "--month", "2026-13", "--data-dir", str(tmp_path)], capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode != 0 and "a month is YYYY-MM" in refused.stderr


async def _totals_alone(spark, server, now, settings) -> None:
    nc = await nats.connect(server.url)
    collector = Collector(nc, CollectorSettings(tick_every=0.1, totals_every=0))
    await collector.start()
    try:
        # a second after the last sample: a minute on, its 5-minute bucket could start after the run, past as_of
        [later] = totals_events("bench", now + timedelta(seconds=1), {"BUD_A": 1_000 + HOURS * PER_HOUR + 5_000}, {})
        collector.intake.put([later], COLLECTOR)
        log = EventLog.over(nc)
        await eventually(lambda: log.read(1, idle_timeout=0.2),
                         lambda found: any(e.event_id == later.event_id for _, e in found), what="the totals stored")
    finally:
        await collector.stop()
        await nc.close()
    report = await asyncio.to_thread(run_once, lambda: spark, settings)
    assert report.events_read >= 1
