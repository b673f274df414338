"""Leadership moves on a three-node cluster under steady atomic-batch load: the server's plain step-down
beside the console's batch-safe move, side by side in one run.

    .venv/bin/python bench/maintain.py [--moves 50] [--streams 3] [--open-ms 100] [--idle-ms 100] [--no-rolling]

On each R3 stream, four publishers send batches without pause, each batch open for about --open-ms (its
messages spread over it), then idle for --idle-ms: the console's atomic publisher (five messages) and
its fast-ingest one in fail mode (ten, flow 5), both following maintenance holds from 3 on; a raw
NATS-protocol atomic publisher (bench/raw_publisher.py) and nats.js's startBatch
(tests/peers/natsjs/steady.mjs; --no-natsjs leaves it out), neither following holds. The same number of
leadership moves, spread over the streams (so over the nodes), is made three times:
1. plain step-down ($JS.API.STREAM.LEADER.STEPDOWN, as `nats stream cluster step-down` does) at once;
2. the console's batch-safe move (console.broker.maintenance, as `maintain drain` makes each one): the
   publish side tapped, the step taken at a moment no batch is open on the stream, time-boxed by the
   batch timeout; the publishers do not follow maintenance holds;
3. the same move, the publishers following maintenance holds (console.broker.holds): no batch begins on
   the stream from the hold to its release, after the new leader is read back.
4. a rolling restart of the three nodes (console.broker.restart, as `maintain rolling --run` does it):
   each node drained, then restarted with nats-server's lame duck signal (tests/restart_node.py), then
   waited for until it is back, the publishers following holds.
Counted for each: batches lost (a commit the server refused: an open batch does not survive its
stream's leader change), batches committed, and the publish stall of a move (the longest gap between
two acks of the stream's publisher around it, p50 and p95). In 2, what the batch-safe move saves is
what its quiet moment saves: a batch begun during the election is still lost; in 3 none begins then.

A collector runs beside the cluster (its publish side tapped): the last columns are every publisher's
lost batches, and the loss ledger's for the same part (from the event log) held against them batch id by
batch id: the batches it names lost, of them the false alarms (a publisher saw the batch committed), and
the batches a publisher saw lost that it never names (missed); "?" counts batches it names that no
publisher knows the id of (a nats.js batch whose first message failed, so startBatch gave no id). A batch
whose first message no server answered never opened (nothing of it was stored): it is on neither side.

A benchmark, not a test: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from dataclasses import dataclass, field
from pathlib import Path

import nats
from nats.js.api import StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import percentile, until  # noqa: E402
from raw_publisher import Outcomes, RawAtomicPublisher  # noqa: E402
from console.broker.atomic import AtomicBatch  # noqa: E402
from console.broker.cluster import EmbeddedCluster  # noqa: E402
from console.broker.eventlog import EventLog  # noqa: E402
from console.broker.maintenance_ledger import LedgerReader  # noqa: E402
from console.config import DataSettings, Settings, event_key  # noqa: E402
from console.domain.ledger_verdict import judge  # noqa: E402
from console.broker.fast import FastBatch  # noqa: E402
from console.broker.holds import Holds  # noqa: E402
from console.broker.maintenance import Tap, move_when_quiet, read_groups, step_down  # noqa: E402
from console.broker.restart import rolling  # noqa: E402
from console.broker.server import BatchLimits  # noqa: E402
from console.domain.maintenance import restart_line  # noqa: E402
from console.errors import BatchError  # noqa: E402
from console.progress import ProgressBar  # noqa: E402

LIMITS = BatchLimits(timeout=5.0)
LAME_DUCK = 'lame_duck_duration: "30s"\nlame_duck_grace_period: "1s"\n'  # the shortest the server takes
ROOT = Path(__file__).resolve().parents[1]
ANSWER_TIMEOUT = 5.0  # seconds the console's publishers wait for a reply


class NatsJsPublisher(Outcomes):
    """tests/peers/natsjs/steady.mjs on one stream's subject, not following holds: nats.js as users run it."""

    def __init__(self, urls: list[str], subject: str, open_ms: int, idle_ms: int):
        super().__init__()
        self.proc = subprocess.Popen(["node", str(ROOT / "tests/peers/natsjs/steady.mjs"), ",".join(urls), subject,
                                      "no-holds", str(open_ms), str(idle_ms), "5"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None and self.proc.stderr.readline().strip() == "ready"
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            outcome, _, batch = line.strip().partition(" ")
            if outcome in ("committed", "lost"):
                self.ended(batch if batch != "-" else None, outcome == "committed")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


class Publisher(Outcomes):
    """Atomic batches on one stream, back to back: each open for `open_s` (`size` messages), then `idle_s`
    without one; each batch's outcome kept (Outcomes)."""

    subject_tail, size = "x", 5

    def __init__(self, nc, stream: str, open_s: float, idle_s: float):
        super().__init__()
        self.nc, self.stream, self.open_s, self.idle_s = nc, stream, open_s, idle_s
        self.acks: list[float] = []  # when each message's publish returned (the commit's, its ack)
        self.stopped = False
        self.holds: Holds | None = None  # followed: no batch begins under a maintenance hold
        self.why: dict[str, str] = {}  # a lost batch's id -> what the publisher was told

    @property
    def lost(self) -> int:
        return sum(not ok for _, ok in self.outcomes)

    @property
    def committed(self) -> int:
        return sum(ok for _, ok in self.outcomes)

    async def run(self) -> None:
        subject = f"{self.stream.lower()}.{self.subject_tail}"
        while not self.stopped:
            batch, sent = self.batch(), 0
            try:
                for _ in range(self.size - 1):
                    await batch.add(subject, b"m" * 64)  # the first waits for its answer: the batch is open
                    sent += 1
                    self.acks.append(time.perf_counter())
                    await asyncio.sleep(self.open_s / self.size)
                await batch.commit(subject, b"last")
                self.acks.append(time.perf_counter())
                self.ended(batch.batch_id, True)
            except (BatchError, nats.errors.Error, asyncio.TimeoutError) as e:
                self.ended(batch.batch_id, False, opened=sent > 0)
                self.why[batch.batch_id or "?"] = f"{type(e).__name__}: {str(e)[:160]} (after {sent} message(s))"
            finally:
                await self.close(batch)
            await asyncio.sleep(self.idle_s)

    def batch(self):
        return AtomicBatch(self.nc, timeout=ANSWER_TIMEOUT, holds=self.holds)

    async def close(self, batch) -> None:
        batch.discard()

    def stall_around(self, at: float, window: float = 10.0) -> float:
        """The longest gap between two publishes from `at` on (the move's effect), within `window` s."""
        times = [t for t in self.acks if at - 1.0 <= t <= at + window]
        return max((b - a for a, b in zip(times, times[1:])), default=0.0)


class FastPublisher(Publisher):
    """Fast-ingest batches in fail mode (the console's FastBatch), ten messages each, as Publisher's atomic ones."""

    subject_tail, size = "fast", 10

    def batch(self):
        return FastBatch(self.nc, flow=5, gap_mode="fail", ack_timeout=ANSWER_TIMEOUT, holds=self.holds)

    async def close(self, batch) -> None:
        await batch.close()


async def moves(nc, publishers: dict[str, Publisher], count: int, batch_safe: bool, label: str,
                others: dict[str, list[Outcomes]]) -> Result:
    """`count` leadership moves round the streams: the console's publishers' (lost, committed, each move's
    stall in ms), the batches named at a step, and each other publisher's (lost, committed) in the window."""
    window_start = time.perf_counter()
    named = 0
    lost0 = sum(p.lost for p in publishers.values())
    committed0 = sum(p.committed for p in publishers.values())
    tap = await Tap.on(nc, list(publishers), timedelta(seconds=LIMITS.timeout)) if batch_safe else None
    if tap is not None:
        await asyncio.sleep(LIMITS.timeout)  # every batch open now is seen by then (drain does the same)
    starts: list[tuple[str, float]] = []
    steps: list[tuple[str, float]] = []  # each stream's new leader read back
    bar = ProgressBar(count, label)
    streams = list(publishers)
    try:
        for i in range(count):
            stream = streams[i % len(streams)]
            group = await _group(nc, stream)
            node = group.leader
            started = time.perf_counter()
            if tap is not None:
                move = await move_when_quiet(nc, node, group, tap, LIMITS.timeout)
                assert move.error is None, move.error
                named += len(move.at_risk)
            else:
                await step_down(nc, group, None)
                await until(lambda: _moved(nc, stream, node), 30, f"{stream} still led by {node}")
            starts.append((stream, started))
            steps.append((stream, time.perf_counter()))
            bar.update(i + 1)
            await asyncio.sleep(1.0)  # the publishers go on between moves, as between nodes of a rolling upgrade
    finally:
        bar.close()
        if tap is not None:
            await tap.close()
    await _last_batches_end(publishers)
    stalls = [1000 * publishers[s].stall_around(t) for s, t in starts]
    window = (window_start, time.perf_counter())
    return Result(sum(p.lost for p in publishers.values()) - lost0,
                  sum(p.committed for p in publishers.values()) - committed0, stalls, named,
                  {kind: _summed(o.between(*window) for o in outs) for kind, outs in others.items()},
                  _losses_said(publishers, others, window, starts, steps) if batch_safe else ())


@dataclass
class Result:
    lost: int
    committed: int
    stalls: list[float]
    named: int = 0  # batches still open at a step (batch-safe moves), named before it
    others: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (lost, committed)
    losses: tuple[str, ...] = ()  # each loss of a publisher that follows holds: what it was told, when


def _losses_said(publishers: dict[str, Publisher], others: dict[str, list[Outcomes]], window: tuple[float, float],
                 starts: list[tuple[str, float]], steps: list[tuple[str, float]], most: int = 5) -> tuple[str, ...]:
    """The console's publishers' lost batches in the window: what each was told, and when against its
    stream's nearest move (its start: the hold; its step: the new leader read back; a stream of None: a
    node's restart, from its drain's start to the node back)."""
    followers = [*publishers.values(), *(p for ps in others.values() for p in ps if isinstance(p, Publisher))]
    said = []
    for p in followers:
        for batch, (t, ok, _) in p.by_id.items():
            if ok or not window[0] <= t <= window[1]:
                continue
            start = min((s for name, s in starts if name in (p.stream, None)), key=lambda s: abs(s - t), default=None)
            step = min((s for name, s in steps if name in (p.stream, None)), key=lambda s: abs(s - t), default=None)
            when = "" if start is None or step is None else \
                f", {1000 * (t - start):+.0f} ms from the nearest move's start, {1000 * (t - step):+.0f} ms from its step"
            said.append(f"{type(p).__name__} on {p.stream} lost {batch}{when}: {p.why.get(batch, '?')}")
    return tuple(said[:most])


async def _last_batches_end(publishers: dict[str, Publisher]) -> None:
    """Until every batch begun in the part has its outcome, one that waits for an answer it never gets too:
    it is counted in the part that made it, not the next."""
    one = next(iter(publishers.values()))
    await asyncio.sleep(max(2 * (one.open_s + one.idle_s), ANSWER_TIMEOUT + 0.5))


def _summed(pairs) -> tuple[int, int]:
    pairs = list(pairs)
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


async def _moved(nc, stream: str, node: str) -> bool:
    try:  # during the election the stream answers nothing: not yet
        info = await nc.jetstream().stream_info(stream)
    except (nats.errors.Error, asyncio.TimeoutError):
        return False
    return bool(info.cluster and info.cluster.leader and info.cluster.leader != node)


async def _group(nc, stream: str):
    """The stream's group as the server reports it, once it has a leader."""
    async def found():
        try:
            return next((g for g in await read_groups(nc, consumers=False) if g.stream == stream and g.leader), None)
        except (nats.errors.Error, asyncio.TimeoutError):
            return None
    return await until(found, 30, f"{stream} has no leader")


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster(Path(tmp), batch_limits=LIMITS,
                                                               extra_config=LAME_DUCK) as cluster:
        nc = await nats.connect(cluster.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        names = [f"BENCH_MAINT_{i}" for i in range(args.streams)]
        for name in names:
            await until(lambda n=name: _created(nc, n), 60, f"{name} not created")
        publishers = {n: Publisher(nc, n, args.open_ms / 1000, args.idle_ms / 1000) for n in names}
        tasks = [asyncio.create_task(p.run()) for p in publishers.values()]
        fast = [FastPublisher(nc, n, args.open_ms / 1000, args.idle_ms / 1000) for n in names]
        tasks += [asyncio.create_task(f.run()) for f in fast]
        raw = [RawAtomicPublisher(cluster.urls, f"{n.lower()}.raw", args.open_ms / 1000, args.idle_ms / 1000)
               for n in names]
        tasks += [asyncio.create_task(r.run()) for r in raw]
        natsjs = [NatsJsPublisher(cluster.urls, f"{n.lower()}.js", args.open_ms, args.idle_ms) for n in names] \
            if args.natsjs else []
        others: dict[str, list[Outcomes]] = {"console fast (fail)": list(fast), "raw protocol": list(raw),
                                             **({"nats.js": list(natsjs)} if natsjs else {})}
        collector, ledger = await _collector(nc, cluster, Path(tmp), names)
        await asyncio.sleep(2.0)
        results, marks = {}, []
        for label, safe in (("plain step-down", False), ("batch-safe move", True)):
            marks.append((label, datetime.now(timezone.utc), time.perf_counter()))
            results[label] = await moves(nc, publishers, args.moves, safe, label, others)
        holds = await Holds.follow(nc, "bench publishers")
        for p in [*publishers.values(), *fast]:
            p.holds = holds
        marks.append(("with holds", datetime.now(timezone.utc), time.perf_counter()))
        results["with holds"] = await moves(nc, publishers, args.moves, True, "with holds", others)
        restarts = []
        if args.rolling:
            marks.append(("rolling restart", datetime.now(timezone.utc), time.perf_counter()))
            results["rolling restart"], restarts = await rolling_restart(nc, cluster, publishers, others)
        held_against = await _ledger_held(ledger, marks, datetime.now(timezone.utc),
                                          {"console atomic": list(publishers.values()), **others})
        collector.terminate()
        collector.wait(timeout=60)
        for p in [*publishers.values(), *fast]:
            p.stopped = True
        for r in raw:
            r.stop()
        for j in natsjs:
            j.stop()
        await asyncio.gather(*tasks)
        await nc.close()
    print(f"\n{args.moves} leadership moves over {args.streams} R3 streams, batches open {args.open_ms} ms then idle "
          f"{args.idle_ms} ms; on each stream the console's atomic publisher and its fast-ingest one in fail mode "
          f"(both following holds from the third row on), a raw-protocol and a nats.js one that do not")
    kinds = list(others)
    print(f"{'':20}{'lost':>8}{'committed':>11}{'lost %':>9}{'stall p50 ms':>14}{'stall p95 ms':>14}"
          + "".join(f"{k + ' lost/committed':>28}" for k in kinds) + f"{'named at a step':>17}"
          + f"{'all lost':>10}{'ledger / false alarms / missed':>33}")
    for label, r in results.items():
        share = 100 * r.lost / max(1, r.lost + r.committed)
        seen = r.lost + sum(lost for lost, _ in r.others.values())
        print(f"{label:20}{r.lost:>8}{r.committed:>11}{share:>9.2f}{percentile(r.stalls, 0.5):>14.0f}"
              f"{percentile(r.stalls, 0.95):>14.0f}"
              + "".join(f"{'%d / %d' % r.others.get(k, (0, 0)):>28}" for k in kinds) + f"{r.named:>17}"
              + f"{seen:>10}{held_against[label].text() if label in held_against else '?':>33}")
    for r in restarts:
        print(f"  {restart_line(r)}")
    for label, r in results.items():
        for line in r.losses:
            print(f"  {label}: {line}")
    for label, held in held_against.items():
        for line in held.said:
            print(f"  {label}: {line}")
    plain, safe, held = (results[k].lost for k in ("plain step-down", "batch-safe move", "with holds"))
    print(f"lost batches, batch-safe / plain: {safe} / {plain}" + (f" = {safe / plain:.2f}" if plain else "")
          + f"; with holds / plain: {held} / {plain}" + (f" = {held / plain:.2f}" if plain else ""))


async def _collector(nc, cluster: EmbeddedCluster, data: Path, names: list[str]):
    """A collector beside the cluster (its publish side tapped, so atomic losses no advisory tells are in
    the ledger too) and the ledger's reader, once it records."""
    event_key(data_dir=data)
    collector = subprocess.Popen([str(Path(sys.executable).parent / "batch-console"), "collect", "--server", ",".join(cluster.urls),
                                  "--data-dir", str(data), "--batch-timeout", str(LIMITS.timeout),
                                  "--tap-publish-side", ",".join(f"{n.lower()}.>" for n in names)],
                                 stdout=subprocess.DEVNULL, stderr=open(data / "collector.log", "w"))
    ledger = LedgerReader(EventLog.over(nc, Settings(data=DataSettings(data_dir=data)).keyed_event_log(make=False)),
                          LIMITS.timeout, 5.0)
    await until(ledger.recording, 120, "the collector is not recording")
    return collector, ledger


@dataclass
class Held:
    """A part's losses in the ledger held against the publishers' own, batch by batch."""
    ledger: int  # batches the ledger names lost in the part
    false_alarms: int  # of them, batches a publisher saw committed
    unknown: int  # of them, batches no publisher knows the id of (a nats.js batch whose first message failed)
    missed: int  # batches a publisher saw lost in the part that the ledger never names
    said: tuple[str, ...] = ()  # of the false alarms and the missed: which publisher's, what the log has of it

    def text(self) -> str:
        return f"{self.ledger} / {self.false_alarms} / {self.missed}" + (f" ({self.unknown} ?)" if self.unknown else "")


async def _ledger_held(ledger: LedgerReader, marks: list[tuple[str, datetime, float]], end: datetime,
                       publishers: dict[str, list[Outcomes]]) -> dict[str, Held]:
    """Each part's lost batches as the loss ledger has them (every stream, from the part's start to the
    next's), held against what the publishers saw of the same batch ids."""
    await ledger.verdict(None, marks[0][1], end, True)  # waits until the collector has judged every batch
    events = [e for _, e in await ledger.log.window(marks[0][1], end + timedelta(seconds=LIMITS.timeout + 10),
                                                    idle_timeout=1.0)]
    everything = judge(events, None, marks[0][1], end + timedelta(seconds=LIMITS.timeout + 10), True).lost
    named = {loss.batch_id for loss in everything}
    seen = {batch: outcome for ps in publishers.values() for p in ps for batch, outcome in p.by_id.items()}
    kind_of = {batch: kind for kind, ps in publishers.items() for p in ps for batch in p.by_id}
    of_batch: dict[str, list[str]] = {}
    for e in events:
        if e.batch_id:
            of_batch.setdefault(e.batch_id, []).append(f"{e.kind.value}({e.stream or 'no stream'})")
    bounds = [(t, clock) for _, t, clock in marks[1:]] + [(end + timedelta(seconds=LIMITS.timeout + 10), math.inf)]
    held = {}
    for (label, start, clock), (until_, clock_end) in zip(marks, bounds):
        lost = [loss.batch_id for loss in judge(events, None, start, until_, True).lost]
        missed = [b for b, (t, ok, opened) in seen.items()
                  if not ok and opened and clock <= t < clock_end and b not in named]
        false = [b for b in lost if b in seen and seen[b][1]]
        lost = [b for b in lost if b not in seen or seen[b][2]]  # a batch that never opened: neither side's loss
        held[label] = Held(len(lost), len(false), sum(b not in seen for b in lost), len(missed),
                           tuple(f"{what} {kind_of[b]} {b}: {', '.join(of_batch.get(b, ['nothing in the log']))}"
                                 for what, found in (("false alarm", false), ("missed", missed)) for b in found[:5]))
    return held


async def rolling_restart(nc, cluster: EmbeddedCluster, publishers: dict[str, Publisher],
                          others: dict[str, list[Outcomes]]):
    """Every node restarted in turn in lame duck mode, as `maintain rolling` does it: (lost, committed, the
    longest publish stall of each stream in each node's restart), and each node's restart."""
    window_start = time.perf_counter()
    lost0 = sum(p.lost for p in publishers.values())
    committed0 = sum(p.committed for p in publishers.values())
    command = f"cd {ROOT} && {sys.executable} -m tests.restart_node {cluster.store_dir}/{{node}} --signal ldm"
    bar = ProgressBar(len(cluster.nodes), "rolling restart")
    done = []

    def said(line: str) -> None:
        if line.startswith("n") and ": restarted" in line or "NOT RESTARTED" in line:
            bar.update(len(done) + 1)

    starts, backs = [], []
    try:
        for node in [f"n{i + 1}" for i in range(len(cluster.nodes))]:
            starts.append(time.perf_counter())
            done += await rolling(nc, None, [node], command, time_box=LIMITS.timeout, batch_timeout=LIMITS.timeout,
                                  run_timeout=120, back_timeout=120, urls=cluster.urls, said=said)
            backs.append((None, time.perf_counter()))
            assert done[-1].error is None, done[-1].error
    finally:
        bar.close()
    await _last_batches_end(publishers)
    stalls = [1000 * p.stall_around(t, window=60.0) for t in starts for p in publishers.values()]
    window = (window_start, time.perf_counter())
    return Result(sum(p.lost for p in publishers.values()) - lost0,
                  sum(p.committed for p in publishers.values()) - committed0, stalls,
                  others={kind: _summed(o.between(*window) for o in outs) for kind, outs in others.items()},
                  losses=_losses_said(publishers, others, window, [(None, t) for t in starts], backs)), done


async def _created(nc, name: str) -> bool:
    try:
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"], num_replicas=3,
                                                     allow_atomic=True, allow_batched=True))
        info = await nc.jetstream().stream_info(name)
        return bool(info.cluster and info.cluster.leader)
    except Exception:
        return False


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=50)
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--open-ms", type=int, default=100)
    parser.add_argument("--idle-ms", type=int, default=100)
    parser.add_argument("--no-rolling", dest="rolling", action="store_false", help="leave out the rolling restart")
    parser.add_argument("--no-natsjs", dest="natsjs", action="store_false",
                        help="leave out the nats.js publishers (node and tests/peers/natsjs's packages needed)")
    asyncio.run(main(parser.parse_args()))
