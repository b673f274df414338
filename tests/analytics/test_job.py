"""The analytics job end to end: real batches -> collector -> event log -> Spark -> SQLite and Delta."""

import asyncio

import pytest
from deltalake import DeltaTable
from sqlmodel import Session, select

from console.analytics.job import JobSettings, run_once
from console.analytics.source import SourceOptions
from console.broker.server import EmbeddedServer
from console.storage import delta, sqlite
from console.storage.tables import EVENTS_SOURCE, AbandonedBatch, AbandonmentHourly, FastBatchSummary, GapHourly
from tests.waits import eventually


def totals(engine):
    with Session(engine) as s:
        hourly = s.exec(select(AbandonmentHourly)).all()
        return {
            "atomic": sum(r.batches for r in hourly if r.kind == "atomic"),
            "fast": sum(r.batches for r in hourly if r.kind == "fast"),
            "gaps": sum(r.gaps for r in s.exec(select(GapHourly)).all()),
            "lost": sum(r.lost for r in s.exec(select(GapHourly)).all()),
            "batches": sorted(r.outcome for r in s.exec(select(FastBatchSummary)).all()),
            "abandoned": len(s.exec(select(AbandonedBatch)).all()),
        }


def delta_totals(settings):
    hourly = DeltaTable(str(settings.delta("abandonment_hourly"))).to_pyarrow_table().to_pylist()
    events = DeltaTable(str(settings.delta("events"))).to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()
    return {
        "atomic": sum(r["batches"] for r in hourly if r["kind"] == "atomic"),
        "fast": sum(r["batches"] for r in hourly if r["kind"] == "fast"),
        "events": len(events),
        "distinct_events": len(set(events)),
    }


async def test_job_keeps_history_exactly_once(spark, server, client, produce, tmp_path, monkeypatch):
    settings = JobSettings(tmp_path, source=SourceOptions.parse({"servers": server.url, "partitions": "2"}))
    engine = sqlite.open_db(settings.db_path)

    await produce(["j1", "j2", "j3"], fast=[("ok", 2), ("fail", 1)])
    first = await asyncio.to_thread(run_once, lambda: spark, settings)
    assert first.events_read > 0
    assert totals(engine) == {"atomic": 3, "fast": 1, "gaps": 2, "lost": 3,
                              "batches": ["committed", "ended_early"], "abandoned": 4}
    assert delta_totals(settings)["atomic"] == 3

    unchanged = await asyncio.to_thread(run_once, lambda: spark, settings)  # nothing new: nothing changes
    assert unchanged.events_read == 0 and totals(engine)["atomic"] == 3

    await produce(["j4", "j5"])
    second = await asyncio.to_thread(run_once, lambda: spark, settings)
    assert second.first_seq == first.last_seq + 1
    assert totals(engine)["atomic"] == 5 and totals(engine)["abandoned"] == 6

    await produce(["j6"])

    def crash(*args, **kwargs):  # killed after the Delta writes, before the offset is recorded
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(sqlite, "commit_run", crash)
    with pytest.raises(KeyboardInterrupt):
        await asyncio.to_thread(run_once, lambda: spark, settings)
    assert delta_totals(settings)["atomic"] == 6 and totals(engine)["atomic"] == 5
    monkeypatch.undo()

    await asyncio.to_thread(run_once, lambda: spark, settings)
    assert totals(engine)["atomic"] == 6 and totals(engine)["abandoned"] == 7
    after = delta_totals(settings)
    assert after["atomic"] == 6 and after["events"] == after["distinct_events"]


async def test_a_backlog_read_in_small_steps_keeps_the_same_history_even_killed_midway(spark, server, client, produce,
                                                                                      tmp_path, monkeypatch):
    """Steps of a few sequences each write what one step writes, and a run killed at its third step's
    commit (its files written, not committed), then run again, writes it too; the driver reads and
    writes a small step as the executors do a large one."""
    await produce(["b1", "b2"], fast=[("ok", 2), ("fail", 1)])
    whole = JobSettings(tmp_path / "whole", source=SourceOptions.parse({"servers": server.url, "partitions": "2"}),
                        driver_reads_up_to=0)  # read and written by the executors; the small steps by the driver
    small = JobSettings(tmp_path / "small", source=SourceOptions.parse({"servers": server.url, "partitions": "2"}), max_events=3)
    one = await asyncio.to_thread(run_once, lambda: spark, whole)

    appends = []
    append = delta.add_files

    def killed_at_the_third(*args):
        appends.append(args[2])
        if len(appends) == 3:
            raise KeyboardInterrupt("killed")
        return append(*args)

    monkeypatch.setattr(delta, "add_files", killed_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        await asyncio.to_thread(run_once, lambda: spark, small)
    monkeypatch.undo()
    assert appends == [3, 6, 9] and delta.written_up_to(small.delta("events")) == 6

    steps = []
    again = await asyncio.to_thread(run_once, lambda: spark, small, lambda done, total: steps.append((done, total)))
    assert (again.first_seq, again.last_seq, again.events_read) == (1, one.last_seq, one.events_read)
    assert steps == [(min(n, one.last_seq), one.last_seq) for n in range(3, one.last_seq + 3, 3)]
    assert totals(sqlite.open_db(small.db_path)) == totals(sqlite.open_db(whole.db_path))
    assert delta_totals(small) == delta_totals(whole)
    by_executors, by_driver = (DeltaTable(str(s.delta("events"))).to_pyarrow_table().sort_by("seq") for s in (whole, small))
    assert by_driver.schema == by_executors.schema and by_driver.equals(by_executors)  # the same rows, typed alike


async def test_analytics_cli_runs_once_and_prints_its_progress_line(server, client, tmp_path):
    import subprocess
    import sys
    from datetime import datetime, timezone
    from pathlib import Path

    from console.broker.eventlog import EventLog
    from console.config import EventLogSettings, event_key
    from console.domain.events import BatchEvent, EventKind

    unsigned = EventLog(client.jetstream())
    await unsigned.ensure()
    await unsigned.append([BatchEvent("forged-run", EventKind.ATOMIC_ABANDONED, datetime.now(timezone.utc), "JOBA",
                                      "forged", reason="timeout")])
    signed = EventLog(client.jetstream(), EventLogSettings(key=event_key(data_dir=tmp_path)))  # the CLI's key
    await signed.append([BatchEvent("cli-run", EventKind.ATOMIC_ABANDONED, datetime.now(timezone.utc), "JOBA", "cli",
                                    reason="timeout")])
    in_log = await signed.last_seq()
    cli = str(Path(sys.executable).parent / "batch-console")
    done = await asyncio.to_thread(
        subprocess.run, [cli, "analytics", "--server", server.url, "--data-dir", str(tmp_path), "--once"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [line] = [l for l in done.stdout.splitlines() if l.startswith("analytics:")]
    forged = in_log - 1  # every earlier event of this module came from a collector without the key
    assert line.startswith(f"analytics: events 1..{in_log}: 1 read, {forged} skipped (forged: unsigned {forged}), ")
    assert (tmp_path / "console.db").exists() and (tmp_path / "delta" / "events").is_dir()


def test_a_run_before_any_collector_says_so(spark, tmp_path):
    with EmbeddedServer(tmp_path / "empty") as empty:
        report = run_once(lambda: spark, JobSettings(tmp_path / "data", source=SourceOptions.parse({"servers": empty.url})))
    assert report.events_read == 0 and report.line().startswith("no event log BATCH_CONSOLE_EVENTS yet")


async def test_a_slow_producer_leaves_no_loss_standing_live_or_in_history(spark, server, client, tmp_path):
    """flow 100, a message every 0.4 s: the collector hears nothing for longer than the batch timeout
    (1 s here), but each message resets the server's timer, and the batch commits. Not a loss."""
    import nats

    from console.broker.fast import FastBatch
    from console.collector.collector import Collector
    from console.errors import BatchError
    from console.config import CollectorSettings
    from console.domain.events import LOST_KINDS, EventKind
    from console.domain.live_model import LiveModel
    from console.storage.history import Reader
    from tests.waits import events_for, wait_until

    conn = await nats.connect(server.url)
    collector = Collector(conn, CollectorSettings(batch_timeout=1.0, tick_every=0.1))
    await collector.start()
    try:
        # The server does not always show a batch's first flow ack to another connection's tap (3 in
        # 60 batches here): a batch the tap never saw start is committed at once, and another begun.
        for _ in range(5):
            tapped = collector.tapped
            batch = FastBatch(client, flow=100)
            await batch.add("joba.slow", b"x")
            try:
                await wait_until(lambda: collector.tapped > tapped, timeout=1.0, what="the tap saw the first ack")
                break
            except AssertionError:
                try:
                    await batch.commit("joba.slow", b"unseen")
                except BatchError:  # waited past the 1 s batch timeout on a loaded machine: the server dropped it
                    pass
        for _ in range(7):
            await asyncio.sleep(0.4)  # the producer's own pace, not a wait for anything
            await batch.add("joba.slow", b"x")
        await asyncio.sleep(0.4)
        ack = await batch.commit("joba.slow", b"end")
        events = await events_for(client, {batch.batch_id},
                                  lambda es: any(e.kind is EventKind.FAST_COMMITTED for e in es))
    finally:
        await collector.stop()
        await conn.close()
    kinds = [e.kind for e in events]
    written = collector.writer
    seen = (f"tapped {collector.tapped}, written {written.events_written}, duplicates {written.duplicates}, "
            f"rejected {dict(collector.rejected)}, errors {dict(collector.errors)}, ignored {dict(collector.ignored)}")
    assert ack.count == 9 and EventKind.FAST_SLOW in kinds and not [k for k in kinds if k in LOST_KINDS], seen
    model = LiveModel()
    for event in events:
        model.apply(event)
    assert model.find_lost(batch.batch_id) is None and batch.batch_id not in model.active

    await asyncio.to_thread(run_once, lambda: spark, JobSettings(tmp_path, source=SourceOptions.parse({"servers": server.url})))
    history = Reader(sqlite.open_db(tmp_path / "console.db"))
    assert history.abandoned_batches(batch_id=batch.batch_id).empty
    with Session(history.engine) as s:
        [summary] = s.exec(select(FastBatchSummary).where(FastBatchSummary.batch_id == batch.batch_id)).all()
    assert (summary.outcome, summary.messages) == ("committed", 9)


async def test_follow_runs_as_soon_as_events_arrive_not_on_its_timer(server, client, tmp_path):
    """`analytics --follow` with a 600 s timer: a signed abandonment reaches History within seconds."""
    import subprocess
    import sys
    from datetime import datetime, timezone
    from pathlib import Path

    from console.broker.eventlog import EventLog
    from console.config import EventLogSettings, event_key
    from console.domain.events import BatchEvent, EventKind

    signed = EventLog(client.jetstream(), EventLogSettings(key=event_key(data_dir=tmp_path)))
    await signed.ensure()
    cli = str(Path(sys.executable).parent / "batch-console")
    out = open(tmp_path / "analytics.log", "w+")
    job = subprocess.Popen([cli, "analytics", "--follow", "--analytics-every", "600", "--follow-gap", "1",
                            "--server", server.url, "--data-dir", str(tmp_path)], stdout=out, stderr=subprocess.STDOUT)
    try:
        log_text = lambda: (tmp_path / "analytics.log").read_text()

        async def runs():
            return log_text().count("analytics:")

        await eventually(runs, timeout=180, what="the first run")
        await signed.append([BatchEvent("follow-run", EventKind.ATOMIC_ABANDONED, datetime.now(timezone.utc), "JOBA",
                                        "followed", reason="timeout")])
        engine = sqlite.open_db(tmp_path / "console.db")

        async def in_history():
            with Session(engine) as session:
                return session.exec(select(AbandonedBatch).where(AbandonedBatch.batch_id == "followed")).first()

        await eventually(in_history, timeout=120, what="the abandonment in History, long before the 600 s timer")

        async def counted():  # the provisional row (console/analytics/ledger_tail.py) the run's own replaced
            return (row := await in_history()) is not None and not row.provisional

        await eventually(counted, timeout=120, what="the run's own row, with its context")
        assert log_text().count("analytics:") == 2, log_text()  # one run for it, none on the timer
    finally:
        job.terminate()
        assert job.wait(timeout=60) in (0, -15), log_text()[-2000:]


async def test_the_follow_watcher_wakes_on_losses_alone(server, client):
    """A collector's status every few seconds, a canary a minute, a reader's lag, clean batches: none changes
    what History must show within seconds, and none wakes the job (its timer reads them); a loss, a
    retraction and a blind window do."""
    from console.analytics.follow import WAKES_FOLLOW
    from console.broker.log_watcher import LogWatcher
    from console.config import ConnectionSettings

    prefix = "batch_console.events"
    watcher = LogWatcher(ConnectionSettings(servers=(server.url,)), f"{prefix}.>",
                         tuple(f"{prefix}.{kind.value}." for kind in WAKES_FOLLOW)).start()
    try:
        async def woken():
            await client.publish(f"{prefix}.atomic_abandoned.JOBA", b"{}")
            return await asyncio.to_thread(watcher.wait, 0.2)

        await eventually(woken, what="the watcher subscribed and woken by an event")
        for kind in ("collector_status._unknown", "canary.BATCH_CONSOLE_CANARY_N1", "consumer_lag._all",
                     "fast_committed.JOBA", "stream_totals._all", "atomic_abandoned_not.JOBA"):
            await client.publish(f"{prefix}.{kind}", b"{}")
        await client.flush()
        assert not await asyncio.to_thread(watcher.wait, 1.0)
        for kind in ("loss_retracted.JOBA", "fast_dropped.JOBA", "capture_interrupted._all"):
            await client.publish(f"{prefix}.{kind}", b"{}")
            assert await asyncio.to_thread(watcher.wait, 10.0), kind
    finally:
        watcher.stop()


def no_spark():
    raise AssertionError("this run asked for Spark")


async def test_the_cli_on_a_log_of_heartbeats_starts_no_jvm_and_one_with_a_loss_does(tmp_path):
    """LazySession: with no Java to start (JAVA_HOME names none), a run over heartbeats alone succeeds,
    and one over a loss fails for want of its JVM."""
    import os
    import subprocess
    import sys
    from datetime import datetime, timezone
    from pathlib import Path

    import nats

    from console.broker.eventlog import EventLog
    from console.config import EventLogSettings, event_key
    from console.domain.events import BatchEvent, EventKind

    cli = str(Path(sys.executable).parent / "batch-console")
    data = tmp_path / "data"
    with EmbeddedServer(tmp_path / "nats") as quiet_server:
        def analytics() -> subprocess.CompletedProcess:
            return subprocess.run([cli, "analytics", "--server", quiet_server.url, "--data-dir", str(data), "--once"],
                                  capture_output=True, text=True, timeout=300,
                                  env={**os.environ, "JAVA_HOME": str(tmp_path / "no-java")})

        nc = await nats.connect(quiet_server.url)
        try:
            log = EventLog(nc.jetstream(), EventLogSettings(key=event_key(data_dir=data)))
            await log.ensure()
            await log.append([BatchEvent("beat", EventKind.COLLECTOR_STATUS, datetime.now(timezone.utc), None)])
            quiet = await asyncio.to_thread(analytics)
            assert quiet.returncode == 0, quiet.stderr[-2000:]
            await log.append([BatchEvent("lazy-loss", EventKind.ATOMIC_ABANDONED, datetime.now(timezone.utc), "JOBA",
                                         "lazy", reason="timeout")])
            loss = await asyncio.to_thread(analytics)
            assert loss.returncode != 0 and "no-java" in loss.stderr, loss.stderr[-2000:]
        finally:
            await nc.close()


async def test_a_run_over_the_collectors_heartbeat_alone_recomputes_nothing(spark, server, client, produce, tmp_path):
    from datetime import datetime, timezone

    from console.broker.eventlog import EventLog
    from console.domain.events import BatchEvent, EventKind

    await produce(["h1"])
    settings = JobSettings(tmp_path, source=SourceOptions.parse({"servers": server.url, "partitions": "2"}))
    await asyncio.to_thread(run_once, lambda: spark, settings)
    log = EventLog(client.jetstream())
    await log.append([BatchEvent("status-1", EventKind.COLLECTOR_STATUS, datetime.now(timezone.utc), None)])
    quiet = await asyncio.to_thread(run_once, no_spark, settings)  # a run that needs no Spark asks for none
    assert quiet.events_read == 1 and quiet.last_seq == await log.last_seq()
    assert "hourly" not in quiet.stages and "scope" not in quiet.stages, quiet.stages
    assert sqlite.offset(sqlite.open_db(settings.db_path), EVENTS_SOURCE) == quiet.last_seq


async def test_heartbeats_alone_wait_for_the_next_run_with_history_level_with_them(spark, server, client, produce,
                                                                                   tmp_path):
    """`--follow`'s timed runs on an idle log: up to a bound of new sequences, heartbeats alone start no
    Spark job; History says it is level with them, and the next real run reads them with the rest."""
    from datetime import datetime, timezone

    from console.broker.eventlog import EventLog
    from console.domain.events import BatchEvent, EventKind
    from console.storage.history import job_position

    def heartbeats(*ids):
        return [BatchEvent(i, EventKind.COLLECTOR_STATUS, datetime.now(timezone.utc), None) for i in ids]

    def raw_ids():
        return set(DeltaTable(str(settings.delta("events"))).to_pyarrow_table(columns=["event_id"])
                   .column("event_id").to_pylist())

    await produce(["d1"])
    settings = JobSettings(tmp_path, source=SourceOptions.parse({"servers": server.url, "partitions": "2"}))
    engine = sqlite.open_db(settings.db_path)
    await asyncio.to_thread(run_once, lambda: spark, settings)
    atomic = totals(engine)["atomic"]  # the module's log holds other tests' batches too
    log = EventLog(client.jetstream())
    await log.append(heartbeats("beat-1", "beat-2", "beat-3"))
    over_bound = await asyncio.to_thread(run_once, lambda: spark, settings, defer_heartbeats=2)
    assert over_bound.events_read == 3 and {"beat-1", "beat-2", "beat-3"} <= raw_ids()

    await log.append(heartbeats("beat-4", "beat-5"))
    deferred = await asyncio.to_thread(run_once, lambda: spark, settings, defer_heartbeats=1_000)
    assert deferred.events_read == 0 and "heartbeats only" in deferred.line(), deferred.line()
    assert "read and write" not in deferred.stages, deferred.stages
    assert sqlite.offset(engine, EVENTS_SOURCE) == over_bound.last_seq  # the raw events have not had them
    assert "beat-4" not in raw_ids()
    assert job_position(engine)[0] == await log.last_seq()  # but History is level with the log

    await produce(["d2"])
    with_them = await asyncio.to_thread(run_once, lambda: spark, settings, defer_heartbeats=1_000)
    assert with_them.first_seq == over_bound.last_seq + 1
    assert {"beat-4", "beat-5"} <= raw_ids() and totals(engine)["atomic"] == atomic + 1
    assert job_position(engine)[0] == sqlite.offset(engine, EVENTS_SOURCE) == await log.last_seq()


async def test_a_recorded_blind_window_reaches_historys_table(spark, server, client, tmp_path):
    """A capture_interrupted event (the collector's record of a window in which the server may have
    dropped advisories) becomes a row of capture_interruptions, which the History page warns of."""
    from datetime import datetime, timedelta, timezone

    from console.broker.eventlog import EventLog
    from console.domain.events import capture_interrupted
    from console.storage.history import Reader
    from console.ui.history import blind_windows_text

    start = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=3)
    log = EventLog(client.jetstream())
    await log.ensure()
    await log.append([capture_interrupted("c1", start, start + timedelta(seconds=4), "node n1 lost")])
    settings = JobSettings(tmp_path, source=SourceOptions.parse({"servers": server.url}))
    await asyncio.to_thread(run_once, lambda: spark, settings)
    windows = Reader(sqlite.open_db(settings.db_path)).capture_interruptions(start - timedelta(hours=1),
                                                                             start + timedelta(hours=1))
    assert windows.to_dict("records") == [{"start": start, "end": start + timedelta(seconds=4),
                                           "reason": "node n1 lost"}]
    text = blind_windows_text(windows)
    assert "capture interrupted from" in text and "losses in this window may be missing (node n1 lost)" in text


async def test_a_maintenance_reaches_historys_table_and_a_limited_reader_sees_it_without_the_ledgers_counts(
        spark, server, client, tmp_path):
    """The console's records of a drain (begun, ended) become one row of `maintenances`: its window, the
    nodes, who, what the ledger said; a begun record alone is no row (it is Live's, until it ends)."""
    from datetime import timedelta

    from console.broker.eventlog import EventLog
    from console.domain.maintenance_record import MaintenanceRecord
    from console.storage.history import Reader

    log = EventLog(client.jetstream())
    await log.ensure()
    begun = MaintenanceRecord.begin("drain", ["n2"], "alice")
    ended = begun.ended(None, 1, 0, "plan safe; 3 leaderships moved")
    other = MaintenanceRecord.begin("restart", ["n1", "n3"], "bob")  # never ended (the console killed)
    await log.append([begun.event(), other.event(), ended.event()])
    settings = JobSettings(tmp_path, source=SourceOptions.parse({"servers": server.url}))
    await asyncio.to_thread(run_once, lambda: spark, settings)
    reader = Reader(sqlite.open_db(settings.db_path))
    around = (begun.start - timedelta(hours=1), begun.start + timedelta(hours=1))
    rows = reader.maintenances(*around).to_dict("records")
    assert [(r["action"], r["nodes"], r["actor"], r["lost"], r["unexpected"]) for r in rows] == [
        ("drain", "n2", "alice", 1, 0)]
    assert rows[0]["start"] == begun.start and rows[0]["end"] == ended.end
    assert rows[0]["outcome"] == "plan safe; 3 leaderships moved"
    limited = reader.seen_by(lambda stream: stream == "TEAM_A").maintenances(*around)
    assert list(limited.columns) == ["start", "end", "action", "nodes", "actor"] and len(limited) == 1


async def test_consumer_lag_records_become_each_consumer_s_hour_and_a_limited_reader_sees_its_streams_only(
        spark, server, client, tmp_path):
    """The alerts part's minute records of every consumer's lag: per consumer and hour, the reads, the most
    pending, the longest and mean lag, the reads that found it stalled; a record that does not read is no row."""
    from datetime import datetime, timedelta, timezone

    from console.broker.eventlog import EventLog
    from console.domain.consumer_lag import Trail, judge, lag_records, parse_consumer
    from console.domain.events import COLLECTOR, BatchEvent, EventKind
    from console.storage.history import Reader

    def judged(stream: str, name: str, floor: int, pending: int, second: int):
        trail = Trail()
        trail.add(parse_consumer({"stream_name": stream, "name": name, "config": {"ack_policy": "explicit"},
                                  "delivered": {"stream_seq": floor}, "ack_floor": {"stream_seq": floor},
                                  "num_pending": pending, "ts": f"2026-12-01T12:00:{second:02d}Z"}))
        return judge(trail, timedelta(seconds=30))

    now = datetime.now(timezone.utc)
    log = EventLog(client.jetstream())
    await log.ensure()
    first = lag_records([judged("TEAM_A", "billing", 5, 40, 0), judged("OTHER", "audit", 9, 0, 0)], "t", now)
    second = lag_records([judged("TEAM_A", "billing", 5, 90, 1)], "t", now + timedelta(seconds=1))
    hostile = BatchEvent("consumer_lag.t.hostile", EventKind.CONSUMER_LAG, now, detail='{"s": [1, 2]', source=COLLECTOR)
    await log.append(first + second + [hostile])
    settings = JobSettings(tmp_path, source=SourceOptions.parse({"servers": server.url}))
    await asyncio.to_thread(run_once, lambda: spark, settings)
    reader = Reader(sqlite.open_db(settings.db_path))
    around = (now - timedelta(hours=2), now + timedelta(hours=2))
    rows = {(r["stream"], r["consumer"]): r for r in reader.consumer_lag_by_hour(*around).to_dict("records")}
    assert set(rows) == {("TEAM_A", "billing"), ("OTHER", "audit")}
    billing = rows["TEAM_A", "billing"]
    assert (billing["reads"], billing["max_pending"], billing["stalled_reads"]) == (2, 90, 0)
    assert rows["OTHER", "audit"]["max_pending"] == 0
    limited = reader.seen_by(lambda stream: stream == "TEAM_A").consumer_lag_by_hour(*around)
    assert limited["stream"].tolist() == ["TEAM_A"]


async def test_analytics_with_another_key_than_the_collectors_fails_with_exit_2_naming_the_key(
        spark, server, client, produce, tmp_path):
    """Not an empty History: the collector's statuses do not verify, so the key is wrong, and the run
    says so and where its key came from."""
    import subprocess
    import sys
    from pathlib import Path

    from console.config import event_key

    collectors = tmp_path / "collector"
    await produce(["other-key"], key=event_key(data_dir=collectors))
    mine = tmp_path / "mine"
    event_key(data_dir=mine)  # another data directory, another key
    cli = str(Path(sys.executable).parent / "batch-console")
    done = await asyncio.to_thread(
        subprocess.run, [cli, "analytics", "--server", server.url, "--data-dir", str(mine), "--once"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "event key wrong" in done.stderr and str((mine / "event.key").resolve()) in done.stderr
