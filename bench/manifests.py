"""From a loss to its repair, under steady load: how soon each injected loss has its manifest, whether the
manifest is exact, and how many are repaired, verified, with no duplicate. One run.

    .venv/bin/python bench/manifests.py [--losses 40] [--concurrency 4] [--load-rate 200]

One embedded server (batch timeout 1 s), a real collector process, the alerts part's manifest keeper, and
a steady load (fast batches of 100 that lose nothing, --load-rate messages a second). Then --losses probes
taking part in the repair protocol (`probe --repair`), --concurrency at a time, each injecting one loss, in
turn: a gap in an ok-mode fast batch, a gap that ends a fail-mode fast batch, a gap in an atomic batch
(the server abandons it: incomplete), an atomic batch left open (abandoned for its timeout). The bench's
truth is its own record: what each probe sent and where it skipped; it reads the stream itself at the end.

Figures: losses with a manifest within 5 s of the loss (the probe's own sight of it), manifests exact
against the truth, repaired and verified, duplicates in the stream, and the repair's p50/p95 from the loss.
Leader changes and dropped connections need a cluster: bench/cluster.py's losses, not repeated here.

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

from console.broker.server import BatchLimits  # noqa: E402
from console.broker.eventlog import EventLog  # noqa: E402
from console.broker.fast import FastBatch  # noqa: E402
from console.broker.server import EmbeddedServer  # noqa: E402
from console.config import DataSettings, Settings  # noqa: E402
from console.domain.fast_ingest import GapMode  # noqa: E402
from console.domain.manifests import SUBJECT, Span, manifest_id, parse_manifest  # noqa: E402
from console.manifests import ManifestKeeper  # noqa: E402
from console.probe import ProbeOptions, run_probe  # noqa: E402

KINDS = ("fast_ok", "fast_fail", "atomic_gap", "atomic_abandon")
COUNT = 20  # messages of each lossy batch
SKIP = 7


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


def truth(kind: str, through: int | None) -> tuple[Span, ...]:
    """What the bench knows it lost, in the manifest's words (an open end closed by the publisher later)."""
    if kind == "fast_ok":
        return (Span(SKIP, SKIP),)
    if kind == "fast_fail":
        return (Span(SKIP, None),)
    return (Span(1, None),)  # atomic: the whole batch, its size unknown to a collector that taps no publish side


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


async def run(args) -> dict:
    data = Path(tempfile.mkdtemp(prefix="bench-manifests-"))
    with EmbeddedServer(data / "nats", batch_limits=BatchLimits(timeout=1.0, max_msgs=1000)) as server:
        log = open(data / "collector.log", "w")
        collector = subprocess.Popen([str(Path(sys.executable).parent / "batch-console"), "collect", "--server", server.url,
                                      "--data-dir", str(data / "console"), "--batch-timeout", "1"],
                                     stdout=log, stderr=subprocess.STDOUT)
        try:
            while "collecting into" not in (data / "collector.log").read_text():
                assert collector.poll() is None, (data / "collector.log").read_text()[-2000:]
                await asyncio.sleep(0.1)
            event_log = Settings(data=DataSettings(data_dir=data / "console")).keyed_event_log(make=False)
            nc = await nats.connect(server.url)
            keeper = ManifestKeeper(nc, EventLog.over(nc, event_log))
            stop_keeper = asyncio.Event()
            keeping = asyncio.create_task(keeper.run(stop_keeper))
            first_seen: dict[str, float] = {}  # manifest id -> when its first version arrived
            final: dict[str, tuple[float, dict]] = {}

            async def heard(msg) -> None:
                m = parse_manifest(msg.data)
                first_seen.setdefault(m.id, time.monotonic())
                if m.state in ("repaired", "partly", "not_repairable"):
                    final.setdefault(m.id, (time.monotonic(), m.as_json()))

            await nc.subscribe(f"{SUBJECT}.>", cb=heard)
            stop_load = asyncio.Event()
            load = asyncio.create_task(steady_load(nc, args.load_rate, stop_load))
            gate = asyncio.Semaphore(args.concurrency)
            results = []

            async def one(i: int) -> None:
                kind = KINDS[i % len(KINDS)]
                async with gate:
                    probe_nc = await nats.connect(server.url)
                    began = time.monotonic()
                    report = await run_probe(probe_nc, options(kind, i), repair_key=event_log.key)
                    await probe_nc.close()
                results.append((kind, began, report))

            await asyncio.gather(*(one(i) for i in range(args.losses)))
            stop_load.set()
            loaded = await load
            await asyncio.sleep(0)
            rows = []
            for kind, began, report in results:
                batch = report.batch_ids[-1] if kind != "atomic_gap" else report.batch_ids[0]
                mid = manifest_id(report.stream, batch)
                manifest = keeper.manifests.get(mid)
                outcome = next((r for r in report.repairs if r.batch == batch), None)
                # the loss, as the probe saw it: its end (a gap's ack, a refused commit, the abandonment's timeout)
                lost_at = began + report.seconds + (1.0 if kind == "atomic_abandon" else 0.0)
                rows.append({
                    "kind": kind, "manifest_s": None if mid not in first_seen else max(0.0, first_seen[mid] - lost_at),
                    "exact": manifest is not None and manifest.missing == truth(kind, manifest.through),
                    "state": outcome.state if outcome else None,
                    "repair_s": None if mid not in final else max(0.0, final[mid][0] - lost_at),
                    "stream": report.stream, "batch": batch, "through": manifest.through if manifest else None})
            duplicates, missing = await _read_back(nc, rows)
            stop_keeper.set()
            await keeping
            await nc.close()
        finally:
            collector.terminate()
            collector.wait(timeout=60)
    within = [r for r in rows if r["manifest_s"] is not None and r["manifest_s"] <= 5.0]
    repaired = [r for r in rows if r["state"] == "repaired"]
    repair_times = sorted(r["repair_s"] for r in rows if r["repair_s"] is not None)
    return {"losses": len(rows), "manifest_within_5s": len(within), "exact": sum(r["exact"] for r in rows),
            "repaired": len(repaired), "duplicates": duplicates, "missing_after": missing,
            "manifest_p95_s": _p(sorted(r["manifest_s"] for r in rows if r["manifest_s"] is not None), 0.95),
            "repair_p50_s": _p(repair_times, 0.5), "repair_p95_s": _p(repair_times, 0.95),
            "load_messages": loaded, "by_kind": {k: sum(1 for r in rows if r["kind"] == k and r["state"] == "repaired")
                                                 for k in KINDS}}


async def _read_back(nc, rows: list[dict]) -> tuple[int, int]:
    """The bench's own read of the streams: every message id of a lossy batch, counted."""
    js = nc.jetstream()
    seen: dict[str, int] = {}
    for stream in sorted({r["stream"] for r in rows}):
        info = await js.stream_info(stream)
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                msg = await js.get_msg(stream, seq)
            except Exception:
                continue
            if msg.headers and "Nats-Msg-Id" in msg.headers:
                seen[msg.headers["Nats-Msg-Id"]] = seen.get(msg.headers["Nats-Msg-Id"], 0) + 1
    duplicates = sum(n - 1 for n in seen.values() if n > 1)
    missing = 0
    for r in rows:
        through = r["through"] or COUNT
        missing += sum(1 for s in range(1, through + 1) if f"{r['batch']}.{s}" not in seen)
    return duplicates, missing


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--losses", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--load-rate", type=int, default=200)
    args = parser.parse_args()
    began = time.monotonic()
    found = asyncio.run(run(args))
    n = found["losses"]
    print(f"injected losses under steady load ({found['load_messages']:,} messages of load): {n}")
    print(f"  with a manifest within 5 s:            {found['manifest_within_5s']}/{n} "
          f"({100 * found['manifest_within_5s'] / n:.0f}%; wanted >= 99%), p95 {found['manifest_p95_s']} s")
    print(f"  manifests exact against the truth:     {found['exact']}/{n}")
    print(f"  repaired and verified:                 {found['repaired']}/{n} (wanted: all; by kind {found['by_kind']})")
    print(f"  duplicates in the streams:             {found['duplicates']} (wanted 0); still missing: {found['missing_after']}")
    print(f"  repair from the loss: p50 {found['repair_p50_s']} s, p95 {found['repair_p95_s']} s (wanted p95 <= 30 s)")
    print(f"  ({time.monotonic() - began:.0f} s in all)")
    print(json.dumps(found))


if __name__ == "__main__":
    main()
