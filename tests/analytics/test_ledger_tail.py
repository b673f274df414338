"""The loss ledger within seconds (console/analytics/ledger_tail.py): real losses through the real collector
into a real event log, the tail's provisional rows in real SQLite, then a real Spark run that replaces them."""

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import nats
from sqlmodel import Session, select

from console.analytics.job import JobSettings, run_once
from console.analytics.ledger_tail import LedgerTail, Retractions, provisional_row
from console.analytics.source import SourceOptions
from console.broker.eventlog import EventLog
from console.config import SPARK_EVENT_KEY, EventLogSettings
from console.domain.events import UNKNOWN_STREAM, BatchEvent, EventKind
from console.storage import sqlite
from console.storage.history import Reader
from console.storage.tables import AbandonedBatch
from tests.waits import eventually

KEY = b"k" * 32
NOW = datetime(2026, 11, 27, 12, tzinfo=timezone.utc)


def test_a_loss_s_row_is_the_job_s_without_its_context_and_none_without_its_stream():
    lost = BatchEvent("e1", EventKind.FAST_DROPPED, NOW, "S", "b1")
    assert provisional_row(7, lost) == {"event_id": "e1", "time": NOW, "stream": "S", "batch_id": "b1", "kind": "fast",
                                        "reason": "dropped", "account": None, "unverified": False, "publisher": None,
                                        "domain": None, "log_seq": 7}
    assert provisional_row(7, BatchEvent("e6", EventKind.ATOMIC_ABANDONED, NOW, "S", "a1", domain="leaf1"))["domain"] \
        == "leaf1"
    assert provisional_row(7, BatchEvent("e2", EventKind.ATOMIC_ABANDONED, NOW, "S", "a1", reason="timeout"))["kind"] \
        == "atomic"
    assert provisional_row(7, BatchEvent("e3", EventKind.FAST_LOST, NOW, None, "b2")) is None  # filled by the job
    assert provisional_row(7, BatchEvent("e4", EventKind.FAST_LOST, NOW, UNKNOWN_STREAM, "b2")) is None
    assert provisional_row(7, BatchEvent("e5", EventKind.FAST_COMMITTED, NOW, "S", "b3")) is None  # not a loss


def test_a_retraction_overrules_a_loss_at_or_before_it_and_is_kept_within_bounds():
    kept = Retractions(kept=2)
    kept.add("b1", NOW)
    fast = {"batch_id": "b1", "kind": "fast", "time": NOW}
    assert kept.overrules(fast) and not kept.overrules({**fast, "time": NOW + timedelta(seconds=1)})
    assert kept.overrules({**fast, "kind": "atomic"})  # an atomic batch's commit answered after it was said lost
    kept.add("b2", NOW)
    kept.add("b3", NOW)
    assert not kept.overrules(fast)  # the oldest went


def test_a_flood_past_what_may_wait_is_left_to_the_job_not_held(tmp_path, monkeypatch):
    from console.analytics import ledger_tail
    from console.broker.log_reader import RawRecord

    monkeypatch.setattr(ledger_tail, "QUEUED_AT_MOST", 3)
    tail = LedgerTail(SourceOptions(event_key=KEY), tmp_path / "console.db")

    async def flood():
        tail._queue = asyncio.Queue(ledger_tail.QUEUED_AT_MOST)
        for seq in range(10):
            tail._queued(RawRecord(seq, b"{}", None, NOW))
        return tail._queue.qsize()

    assert asyncio.run(flood()) == 3 and tail.left == 7
    tail.write([RawRecord(1, b"{" * 100_000, {"Nats-Msg-Id": "x"}, NOW), RawRecord(2, b"\x00", None, NOW)])
    assert tail.skipped == 2 and ledger(tail.engine) == {}  # unsigned, deep, binary: counted, nothing written


def ledger(engine) -> dict[str, AbandonedBatch]:
    with Session(engine) as s:
        return {row.event_id: row for row in s.exec(select(AbandonedBatch)).all()}


def asked(fn, *args):
    """A probe for `eventually`: fn(*args) off the event loop."""
    return lambda: asyncio.to_thread(fn, *args)


async def test_losses_are_in_the_ledger_within_seconds_then_the_job_s_rows_replace_them_once(
        spark, server, client, produce, tmp_path):
    settings = JobSettings(tmp_path, source=SourceOptions.parse({"servers": server.url, SPARK_EVENT_KEY: KEY.decode()}))
    engine = sqlite.open_db(settings.db_path)
    await produce(["lt0"], key=KEY)
    await asyncio.to_thread(run_once, lambda: spark, settings)  # the job is past the first loss: the tail leaves it alone
    covered = set(ledger(engine))
    assert len(covered) == 1 and not any(r.provisional for r in ledger(engine).values())

    tail = LedgerTail(settings.source, settings.db_path).start()
    try:
        await produce(["lt1", "lt2"], key=KEY)
        rows = await eventually(asked(ledger, engine), lambda found: len(found) == 3, what="two provisional rows")
        new = [r for r in rows.values() if r.event_id not in covered]
        assert {(r.batch_id, r.stream, r.kind, r.provisional, r.leader_elections) for r in new} == {
            ("lt1", "JOBA", "atomic", True, 0), ("lt2", "JOBA", "atomic", True, 0)}
        assert Reader(engine).ledger_moved() >= max(r.log_seq for r in new)  # the pages read the ledger again

        # hostile records on the log's own subjects: unsigned, and a copy of a loss under a new message id
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        forged = BatchEvent("forged-1", EventKind.ATOMIC_ABANDONED, NOW, "JOBA", "forged", reason="timeout")
        await js.publish(forged.subject("batch_console.events"), forged.to_json(), headers={"Nats-Msg-Id": "forged-1"})
        stored = await js.get_msg("BATCH_CONSOLE_EVENTS", new[0].log_seq)  # signed, as the collector wrote it
        await js.publish(stored.subject, stored.data, headers={**stored.headers, "Nats-Msg-Id": "copy-1"})
        await eventually(asked(lambda: tail.skipped), lambda n: n >= 2, what="both counted and skipped")
        assert set(ledger(engine)) == set(rows)

        # a fast loss with its stream, then its retraction through the collector's own writer: back out
        log = EventLog.over(nc, EventLogSettings(key=KEY))
        appended = await log.append([BatchEvent("fl-1", EventKind.FAST_LOST, NOW, "JOBA", "fb-1")])
        assert appended.stored == 1, appended
        await eventually(asked(ledger, engine), lambda found: "fl-1" in found, what="the fast loss")
        appended = await log.append([BatchEvent("fr-1", EventKind.LOSS_RETRACTED, NOW + timedelta(seconds=1), "JOBA",
                                                "fb-1")])
        assert appended.stored == 1, appended
        await eventually(asked(ledger, engine), lambda found: "fl-1" not in found, what="retracted")
        await nc.close()

        report = await asyncio.to_thread(run_once, lambda: spark, settings)
        assert report.events_read > 0
        after = ledger(engine)
        assert set(after) == set(rows)  # the same losses, once each: the forged one and the copy never
        assert not any(r.provisional for r in after.values())
    finally:
        tail.stop()

    again = LedgerTail(settings.source, settings.db_path).start()  # a restart: nothing the job covered comes back
    try:
        await asyncio.sleep(0)
        async with await nats.connect(server.url) as nc:
            await EventLog.over(nc, EventLogSettings(key=KEY)).append(
                [BatchEvent("late-1", EventKind.ATOMIC_ABANDONED, NOW, "JOBA", "late", reason="timeout")])
        found = await eventually(asked(ledger, engine), lambda rows: "late-1" in rows, what="a loss after the restart")
        assert {e for e, r in found.items() if r.provisional} == {"late-1"}
    finally:
        again.stop()


async def test_a_tail_started_before_the_event_log_exists_follows_it_once_it_does(server, tmp_path, monkeypatch):
    """A fresh `up` starts the analytics part beside the collector that makes the event log."""
    from console.analytics import ledger_tail

    monkeypatch.setattr(ledger_tail, "RETRY_EVERY", 0.2)
    source = replace(SourceOptions.parse({"servers": server.url, SPARK_EVENT_KEY: KEY.decode()}),
                     stream="LATE_EVENTS", prefix="late.events")
    tail = LedgerTail(source, tmp_path / "console.db").start()
    try:
        async with await nats.connect(server.url) as nc:
            log = EventLog.over(nc, EventLogSettings(key=KEY, stream="LATE_EVENTS", subject_prefix="late.events"))
            await log.ensure()
            await log.append([BatchEvent("late-log-1", EventKind.ATOMIC_ABANDONED, NOW, "JOBA", "b", reason="timeout")])
        found = await eventually(asked(ledger, tail.engine), lambda rows: "late-log-1" in rows, what="followed")
        assert found["late-log-1"].provisional
    finally:
        tail.stop()
