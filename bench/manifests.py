"""From a loss to its repair, under steady load: how soon each injected loss has its manifest, whether the
manifest is exact, and how many are repaired, verified, with no duplicate. One run.

    .venv/bin/python bench/manifests.py [--losses 48] [--concurrency 4] [--load-rate 200] [--leader-changes 6]

One embedded server (batch timeout 1 s; `max_buffered_msgs: 200` a stream), a real collector process, the
alerts part's manifest keeper, and a steady load (fast batches of 100 that lose nothing, --load-rate messages
a second). Then --losses publishers taking part in the repair protocol, --concurrency at a time, each
injecting one loss, in turn: a gap in an ok-mode fast batch, a gap that ends a fail-mode fast batch, a gap in
an atomic batch (the server abandons it: incomplete), an atomic batch left open (abandoned for its timeout),
a fast batch whose TCP connection is cut with messages in flight, and a fast batch whose publisher never
waits for its flow acks (the server refuses what its queue cannot hold). Then, on a three-node cluster with
its own collector (tapping the publish side), --leader-changes atomic batches open while their R3 stream's
leader steps down. The first four are `probe --repair`; the others bench/injections.py.

The bench's truth is its own record: what each publisher sent and where it skipped, and for a cut connection,
an over-committed flow and a leader change, the originals the stream holds (read by the bench itself).

Figures: losses with a manifest within 5 s of the loss (the publisher's own sight of it), manifests exact
against the truth, repaired and verified, duplicates in the stream, and the repair's p50/p95 from the loss.

A benchmark, not a test: read the ratios (these machines are shared and noisy).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nats  # noqa: E402
import nats.js.errors  # noqa: E402

from injections import dropped_connection, leader_changed, over_committed  # noqa: E402
from console.broker.admin import StreamAdmin  # noqa: E402
from console.broker.cluster import EmbeddedCluster  # noqa: E402
from console.broker.eventlog import EventLog  # noqa: E402
from console.broker.fast import FastBatch  # noqa: E402
from console.broker.repair import MSG_ID  # noqa: E402
from console.broker.server import BatchLimits, EmbeddedServer  # noqa: E402
from console.config import DataSettings, Settings  # noqa: E402
from console.domain.fast_ingest import GapMode  # noqa: E402
from console.domain.manifests import REPAIR_OF, SUBJECT, Span, manifest_id, parse_manifest  # noqa: E402
from console.manifests import ManifestKeeper  # noqa: E402
from console.probe import FINAL, ProbeOptions, run_probe  # noqa: E402

PROBED = ("fast_ok", "fast_fail", "atomic_gap", "atomic_abandon")
INJECTED = ("fast_dropped_conn", "fast_overcommit")
KINDS = (*PROBED, *INJECTED)
COUNT = 20  # messages of each probe's lossy batch
SKIP = 7
LIMITS = BatchLimits(timeout=1.0, max_msgs=1000)


def options(kind: str, i: int) -> ProbeOptions:
    stream = f"LOSS_{i % 4}"
    common = dict(stream=stream, subject=f"{stream.lower()}.x", count=COUNT, repair=True, repair_wait=60, timeout=3)
    if kind == "fast_ok":
        return ProbeOptions("fast", gap_mode=GapMode.OK, skip_seq=SKIP, flow=5, **common)
    if kind == "fast_fail":
        return ProbeOptions("fast", gap_mode=GapMode.FAIL, skip_seq=SKIP, flow=5, **common)
    if kind == "atomic_gap":
        return ProbeOptions("atomic", batch_size=COUNT, skip_seq=SKIP, **common)
    return ProbeOptions("atomic", batch_size=COUNT, abandon=True, **common)


def truth(kind: str) -> tuple[Span, ...]:
    """What a probe knows it lost, in the manifest's words (an open end closed by the publisher later)."""
    if kind == "fast_ok":
        return (Span(SKIP, SKIP),)
    if kind == "fast_fail":
        return (Span(SKIP, None),)
    return (Span(1, None),)  # atomic: the whole batch, its size unknown to a collector that taps no publish side


class Heard:
    """Every manifest the console publishes, as a publisher hears it: when its first version came, and its
    final state's."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.final: dict[str, float] = {}

    async def heard(self, msg) -> None:
        m = parse_manifest(msg.data)
        self.first.setdefault(m.id, time.monotonic())
        if m.state in FINAL:
            self.final.setdefault(m.id, time.monotonic())


class Console:
    """A collector process and a manifest keeper on one system."""

    def __init__(self, urls: list[str], data: Path, tapped: tuple[str, ...] = ()):
        self.urls, self.data, self.tapped = urls, data, tapped
        data.mkdir(parents=True, exist_ok=True)

    async def __aenter__(self) -> Console:
        self.output = open(self.data / "collector.log", "w")
        taps = [a for subject in self.tapped for a in ("--tap-publish-side", subject)]
        self.collector = subprocess.Popen(
            [str(Path(sys.executable).parent / "batch-console"), "collect", *[a for u in self.urls for a in ("--server", u)],
             "--data-dir", str(self.data / "console"), "--batch-timeout", str(LIMITS.timeout), *taps],
            stdout=self.output, stderr=subprocess.STDOUT)
        while "collecting into" not in (self.data / "collector.log").read_text():
            assert self.collector.poll() is None, (self.data / "collector.log").read_text()[-2000:]
            await asyncio.sleep(0.1)
        self.event_log = Settings(data=DataSettings(data_dir=self.data / "console")).keyed_event_log(make=False)
        self.nc = await nats.connect(self.urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        self.keeper = ManifestKeeper(self.nc, EventLog.over(self.nc, self.event_log))
        self.stop = asyncio.Event()
        self.keeping = asyncio.create_task(self.keeper.run(self.stop))
        self.heard = Heard()
        await self.nc.subscribe(f"{SUBJECT}.>", cb=self.heard.heard)
        return self

    async def __aexit__(self, *exc) -> None:
        self.stop.set()
        await self.keeping
        await self.nc.close()
        self.collector.terminate()
        self.collector.wait(timeout=60)

    def row(self, kind: str, stream: str, batch: str, lost_at: float, wanted: set[int] | tuple[Span, ...],
            state: str | None, count: int) -> dict:
        mid = manifest_id(stream, batch)
        manifest = self.keeper.manifests.get(mid)
        if manifest is None:
            exact = False
        elif isinstance(wanted, tuple):
            exact = manifest.missing == wanted
        else:
            exact = {s for span in manifest.missing for s in span.seqs(manifest.through or count)} == wanted
        said = [str(span) for span in manifest.missing] + [manifest.rests_on[-400:]] if manifest else None
        return {"wanted": str(wanted)[:200], "missing": said, "kind": kind, "stream": stream, "batch": batch, "state": state, "exact": exact,
                "manifest_s": None if mid not in self.heard.first else max(0.0, self.heard.first[mid] - lost_at),
                "repair_s": None if mid not in self.heard.final else max(0.0, self.heard.final[mid] - lost_at),
                "through": (manifest.through if manifest else None) or count}


async def settled(injected, wait: float = 60.0) -> str | None:
    """The console's last word on an injected loss, as its publisher's Repairer has it."""
    mid = manifest_id(injected.stream, injected.batch)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        state = injected.repairer.states.get(mid)
        if state is not None and state.state in FINAL:
            return state.state
        injected.repairer.changed.clear()
        try:
            await asyncio.wait_for(injected.repairer.changed.wait(), max(0.1, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            break
    state = injected.repairer.states.get(mid)
    return state.state if state else None


async def originals_missing(nc, stream: str, batch: str, count: int) -> set[int]:
    """The batch sequences whose original (not a repair's copy) the stream does not hold."""
    held = set()
    for seq, headers in await headers_of(nc, stream):
        if REPAIR_OF not in headers and headers.get(MSG_ID, "").startswith(f"{batch}."):
            held.add(int(headers[MSG_ID].rsplit(".", 1)[1]))
    return set(range(1, count + 1)) - held


async def headers_of(nc, stream: str) -> list[tuple[int, dict]]:
    js = nc.jetstream()
    info = await js.stream_info(stream)
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        for attempt in range(5):
            try:
                msg = await js.get_msg(stream, seq)
                break
            except nats.js.errors.NotFoundError:
                msg = None  # deleted: not there
                break
            except Exception as e:
                if attempt == 4:
                    raise RuntimeError(f"{stream} seq {seq} not read: {e!r}") from e
                await asyncio.sleep(0.2)
        if msg is not None:
            out.append((seq, msg.headers or {}))
    return out


async def steady_load(nc, rate: int, stop: asyncio.Event) -> int:
    await nc.jetstream().add_stream(name="LOAD", subjects=["load.>"], allow_batched=True)
    sent = 0
    while not stop.is_set():
        began = time.monotonic()
        async with FastBatch(nc, flow=50) as batch:
            for _ in range(99):
                await batch.add("load.x", b"l" * 64)
            await batch.commit("load.x", b"l" * 64)
        sent += 100
        await asyncio.sleep(max(0.0, 100 / rate - (time.monotonic() - began)))
    return sent


async def one_server(args, data: Path) -> tuple[list[dict], int]:
    with EmbeddedServer(data / "nats", batch_limits=LIMITS, jetstream_config="max_buffered_msgs: 200") as server:
        async with Console([server.url], data) as console:
            js = console.nc.jetstream()
            for i in range(args.losses):
                if KINDS[i % len(KINDS)] in INJECTED:
                    await js.add_stream(name=f"INJ_{i}", subjects=[f"inj_{i}.>"], allow_batched=True, allow_atomic=True)
            stop_load = asyncio.Event()
            load = asyncio.create_task(steady_load(console.nc, args.load_rate, stop_load))
            gate = asyncio.Semaphore(args.concurrency)
            rows: list[dict] = []

            async def one(i: int) -> None:
                kind = KINDS[i % len(KINDS)]
                key = console.event_log.key
                async with gate:
                    if kind in PROBED:
                        probe_nc = await nats.connect(server.url)
                        began = time.monotonic()
                        report = await run_probe(probe_nc, options(kind, i), repair_key=key)
                        await probe_nc.close()
                        batch = report.batch_ids[-1] if kind != "atomic_gap" else report.batch_ids[0]
                        outcome = next((r for r in report.repairs if r.batch == batch), None)
                        # the loss as the probe saw it: its end (a gap's ack, a refused commit, the abandonment's timeout)
                        lost_at = began + report.seconds + (LIMITS.timeout if kind == "atomic_abandon" else 0.0)
                        rows.append(console.row(kind, report.stream, batch, lost_at, truth(kind),
                                                outcome.state if outcome else None, COUNT))
                        return
                    stream = f"INJ_{i}"
                    if kind == "fast_dropped_conn":
                        injected = await dropped_connection(server.url, stream, key)
                    else:
                        injected = await over_committed(server.url, stream, key)
                    state = await settled(injected)
                    await injected.close()
                    wanted = await originals_missing(console.nc, stream, injected.batch, injected.count)
                    rows.append(console.row(kind, stream, injected.batch, injected.lost_at, wanted, state,
                                            injected.count))

            await asyncio.gather(*(one(i) for i in range(args.losses)))
            stop_load.set()
            loaded = await load
            for r in rows:
                r.update(await read_back(console.nc, r))
    return rows, loaded


async def cluster(args, data: Path) -> list[dict]:
    streams = [f"LEAD_{i}" for i in range(args.leader_changes)]
    with EmbeddedCluster(data / "cluster", 3, batch_limits=BatchLimits(timeout=5.0, max_msgs=1000)) as nodes:
        async with Console(nodes.urls, data, tapped=tuple(f"{s.lower()}.>" for s in streams)) as console:
            admin = StreamAdmin(console.nc)
            for stream in streams:
                await console.nc.jetstream().add_stream(name=stream, subjects=[f"{stream.lower()}.>"],
                                                        num_replicas=3, allow_atomic=True)

            async def step_down(stream: str) -> None:
                before = await admin.leader(stream)
                await admin.step_down(stream)
                while (await admin.leader(stream)) in (None, before):
                    await asyncio.sleep(0.1)

            rows = []
            for stream in streams:
                injected = await leader_changed(nodes.urls, stream, console.event_log.key, step_down)
                state = await settled(injected)
                await injected.close()
                wanted = await originals_missing(console.nc, stream, injected.batch, injected.count)
                rows.append(console.row(injected.kind, stream, injected.batch, injected.lost_at, wanted, state,
                                        injected.count))
                rows[-1].update(await read_back(console.nc, rows[-1]))
    return rows


async def read_back(nc, row: dict) -> dict:
    """The bench's own read of the stream after the repair: each message of the batch, counted by its id."""
    seen: dict[int, int] = {}
    for _, headers in await headers_of(nc, row["stream"]):
        if headers.get(MSG_ID, "").startswith(f"{row['batch']}."):
            seq = int(headers[MSG_ID].rsplit(".", 1)[1])
            seen[seq] = seen.get(seq, 0) + 1
    return {"duplicates": sum(n - 1 for n in seen.values()),
            "missing_after": sum(1 for s in range(1, row["through"] + 1) if s not in seen)}


async def run(args) -> dict:
    data = Path(tempfile.mkdtemp(prefix="bench-manifests-"))
    rows, loaded = await one_server(args, data / "one")
    if args.leader_changes:
        (data / "three").mkdir()
        rows += await cluster(args, data / "three")
    within = [r for r in rows if r["manifest_s"] is not None and r["manifest_s"] <= 5.0]
    repair_times = sorted(r["repair_s"] for r in rows if r["repair_s"] is not None)
    kinds = sorted({r["kind"] for r in rows}, key=lambda k: (*KINDS, "atomic_leader_change").index(k))
    return {"losses": len(rows), "manifest_within_5s": len(within), "exact": sum(r["exact"] for r in rows),
            "repaired": sum(r["state"] == "repaired" for r in rows), "duplicates": sum(r["duplicates"] for r in rows),
            "missing_after": sum(r["missing_after"] for r in rows),
            "manifest_p95_s": _p(sorted(r["manifest_s"] for r in rows if r["manifest_s"] is not None), 0.95),
            "repair_p50_s": _p(repair_times, 0.5), "repair_p95_s": _p(repair_times, 0.95), "load_messages": loaded,
            "by_kind": {k: f"{sum(1 for r in rows if r['kind'] == k and r['state'] == 'repaired')}"
                           f"/{sum(1 for r in rows if r['kind'] == k)}" for k in kinds},
            "not_repaired_or_inexact": [(r["kind"], r["state"], r["exact"], r["wanted"], r["missing"], r["missing_after"], r["through"])
                                        for r in rows if r["state"] != "repaired" or not r["exact"] or r["missing_after"]]}


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--losses", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--load-rate", type=int, default=200)
    parser.add_argument("--leader-changes", type=int, default=6)
    args = parser.parse_args()
    began = time.monotonic()
    found = asyncio.run(run(args))
    n = found["losses"]
    print(f"injected losses under steady load ({found['load_messages']:,} messages of load): {n}")
    print(f"  with a manifest within 5 s:            {found['manifest_within_5s']}/{n} "
          f"({100 * found['manifest_within_5s'] / n:.0f}%; wanted >= 99%), p95 {found['manifest_p95_s']} s")
    print(f"  manifests exact against the truth:     {found['exact']}/{n}")
    print(f"  repaired and verified:                 {found['repaired']}/{n} (wanted: all)")
    print(f"    by kind:                             {found['by_kind']}")
    print(f"  duplicates in the streams:             {found['duplicates']} (wanted 0); still missing: {found['missing_after']}")
    print(f"  repair from the loss: p50 {found['repair_p50_s']} s, p95 {found['repair_p95_s']} s (wanted p95 <= 30 s)")
    print(f"  ({time.monotonic() - began:.0f} s in all)")
    print(json.dumps(found))


if __name__ == "__main__":
    main()
