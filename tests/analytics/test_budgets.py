"""Loss budgets end to end: three weeks of a stream's life written with back-dated times through the
collector's own writer (its stream totals every hour, fast batches started, messages lost in gaps,
batches dropped), a real Spark run, and each objective's consumption within 1% of the truth in SQLite
and Delta; an objective whose atomic batches nobody counted says its batch rate is not known."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import nats
from deltalake import DeltaTable

from console.analytics.job import JobSettings, run_once
from console.analytics.source import SourceOptions
from console.collector.collector import Collector
from console.config import CollectorSettings
from console.domain.budgets import parse_objectives, totals_events
from console.domain.events import COLLECTOR, BatchEvent, EventKind
from console.storage import sqlite
from console.storage.budgets import status_rows
from tests.waits import events_for

OBJECTIVES = parse_objectives('''
[[objective]]
name = "orders"
streams = ["BUD_A"]
lost_messages_per_million = 10
lost_batches_per_thousand = 2

[[objective]]
name = "with atomic"
streams = ["BUD_*"]
lost_batches_per_thousand = 2
''')
HOURS = 21 * 24
PER_HOUR = 10_000


def three_weeks(now: datetime) -> tuple[list[BatchEvent], dict[str, float]]:
    """The events, and the truth: each objective's share of its budget spent."""
    start = now - timedelta(hours=HOURS)
    events: list[BatchEvent] = []
    for h in range(HOURS + 1):
        t = start + timedelta(hours=h)
        events += totals_events("bench", t, {"BUD_A": 1_000 + h * PER_HOUR}, {})
        for i in range(4):
            events.append(BatchEvent(f"st.{h}.{i}", EventKind.FAST_STARTED, t + timedelta(minutes=i), "BUD_A",
                                     f"b{h}x{i}", flow=10))
    lost = [(h, 2) for h in range(0, HOURS, 25)]  # 21 gaps, 42 messages
    for h, n in lost:
        events.append(BatchEvent(f"gap.{h}", EventKind.FAST_GAP, start + timedelta(hours=h, minutes=30), "BUD_A",
                                 f"b{h}x0", gap_mode="ok", seq=5 + n, first_lost_seq=5, lost=n))
    for h in (10, 200, 400):
        events.append(BatchEvent(f"drop.{h}", EventKind.FAST_DROPPED, start + timedelta(hours=h, minutes=40),
                                 "BUD_A", f"b{h}x1", inferred=True))
    events.append(BatchEvent("ab.1", EventKind.ATOMIC_ABANDONED, start + timedelta(hours=300), "BUD_B", "atomic-1",
                             reason="timeout"))
    stored = HOURS * PER_HOUR  # the first sample is the baseline
    lost_messages = sum(n for _, n in lost)
    batches = (HOURS + 1) * 4
    truth = {"messages": lost_messages / (10 / 1e6 * (stored + lost_messages)), "batches": 3 / (2 / 1e3 * batches)}
    return events, truth


async def test_three_weeks_of_losses_spend_each_budget_as_counted(spark, server, tmp_path):
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
    await asyncio.to_thread(run_once, spark, settings)
    rows = {(r.objective, r.measure): r for r in status_rows(sqlite.open_db(settings.db_path))}
    messages, batches = rows[("orders", "messages")], rows[("orders", "batches")]
    assert messages.lost == 42 and messages.total == HOURS * PER_HOUR + 42
    assert abs(messages.spent - truth["messages"]) <= 0.01 * truth["messages"]
    assert batches.lost == 3 and abs(batches.spent - truth["batches"]) <= 0.01 * truth["batches"]
    assert messages.burn_3d is not None and messages.burn_5m == 0.0  # the last hour stored, nothing lost
    unknown = rows[("with atomic", "batches")]
    assert unknown.known is False and unknown.spent is None  # BUD_B's atomic batches: nobody counted them
    written = {(r["objective"], r["measure"]): r
               for r in DeltaTable(str(settings.delta("budget_status"))).to_pyarrow_table().to_pylist()}
    assert written[("orders", "messages")]["lost"] == 42 and written[("with atomic", "batches")]["known"] is False
