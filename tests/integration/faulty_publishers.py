"""Deliberately wrong batch publishers, written with raw nats-py, one per conformance statement: each
breaks its statement and keeps every other one it touches (on a stream of its own, so no other
batch changes the flow the server grants it). Each returns how many batches it published."""

from __future__ import annotations

import asyncio
import uuid

import nats.js.errors
from nats.aio.client import Client
from nats.js.api import StreamConfig

from console.broker.fast import FastBatch

FAST_TIMEOUT = 1.0  # TEST_LIMITS: the server's batch timeout


class RawFast:
    """One fast batch as the wire has it: reply subjects written by hand, replies collected."""

    def __init__(self, nc: Client, subject: str, flow: int = 10, gap: str = "ok", batch_id: str | None = None):
        self.nc, self.subject, self.flow, self.gap = nc, subject, flow, gap
        self.batch_id = batch_id or uuid.uuid4().hex[:20]
        self.prefix = nc.new_inbox()
        self.replies: asyncio.Queue = asyncio.Queue()
        self.sub = None

    async def open(self) -> RawFast:
        self.sub = await self.nc.subscribe(f"{self.prefix}.{self.batch_id}.>", cb=self.replies.put)
        return self

    def reply_to(self, seq: int, op: int, flow: int | None = None) -> str:
        return f"{self.prefix}.{self.batch_id}.{flow or self.flow}.{self.gap}.{seq}.{op}.$FI"

    async def send(self, seq: int, op: int = 1, flow: int | None = None, headers: dict | None = None) -> None:
        await self.nc.publish(self.subject, b"x", reply=self.reply_to(seq, op, flow), headers=headers)

    async def answer(self, timeout: float = 5.0):
        return await asyncio.wait_for(self.replies.get(), timeout)

    async def until(self, text: str, timeout: float = 5.0):
        """The first reply whose body contains `text`."""
        while True:
            msg = await self.answer(timeout)
            if text.encode() in msg.data:
                return msg

    async def start(self) -> None:
        await self.send(1, 0)
        await self.nc.flush()
        await self.answer()

    async def close(self) -> None:
        """Flushed; the inbox stays until the connection closes, so the collector can still name it."""
        await self.nc.flush()


async def fast_stream(nc: Client, name: str) -> str:
    """The stream, made unless it is there (a test may have made it replicated)."""
    try:
        await nc.jetstream().stream_info(name)
    except nats.js.errors.NotFoundError:
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=[f"conf.{name.lower()}.>"], allow_batched=True))
    return f"conf.{name.lower()}.x"


async def atomic_stream(nc: Client, name: str) -> str:
    await nc.jetstream().add_stream(StreamConfig(name=name, subjects=[f"conf.{name.lower()}.>"], allow_atomic=True))
    return f"conf.{name.lower()}.x"


async def within_windows(batch: RawFast, first: int, last: int) -> None:
    """Messages first..last, two flows at most beyond the last ack (as ADR-50's clients do)."""
    acked = 0
    for seq in range(first, last + 1):
        while seq - acked > 2 * batch.flow:
            msg = await batch.until('"type":"ack"')
            acked = max(acked, int(msg.data.split(b'"seq":')[1].split(b",")[0]))
        await batch.send(seq)
    await batch.nc.flush()


async def committed(batch: RawFast, seq: int) -> None:
    await batch.send(seq, 2)
    await batch.until('"batch"')
    await batch.close()


# -- fast ingest ---------------------------------------------------------------------------------

async def f01_start_not_at_one(nc: Client) -> int:
    batch = await RawFast(nc, await fast_stream(nc, "F_F01")).open()
    await batch.send(2, 0)  # a start at sequence 2: refused (10206)
    await batch.answer()
    await batch.close()
    return 1


async def f02_does_not_wait(nc: Client) -> int:
    batch = await RawFast(nc, await fast_stream(nc, "F_F02")).open()
    await batch.send(1, 0)
    for seq in range(2, 6):  # in the same write as the start, before its answer
        await batch.send(seq)
    await nc.flush()
    await committed(batch, 6)
    return 1


async def f03_skips_a_sequence(nc: Client) -> int:
    batch = await RawFast(nc, await fast_stream(nc, "F_F03")).open()
    await batch.start()
    await within_windows(batch, 2, 5)
    await within_windows(batch, 7, 9)  # 6 never sent
    await committed(batch, 10)
    return 1


async def f04_changes_its_flow_token(nc: Client) -> int:
    batch = await RawFast(nc, await fast_stream(nc, "F_F04")).open()
    await batch.start()
    await within_windows(batch, 2, 4)
    await batch.send(5, flow=20)  # the start said 10
    await committed(batch, 6)
    return 1


async def f05_ignores_the_flow(nc: Client) -> int:
    batch = await RawFast(nc, await fast_stream(nc, "F_F05")).open()
    await batch.start()
    for seq in range(2, 120):  # 118 messages beyond ack 0 at a flow of 10
        await batch.send(seq)
    await committed(batch, 120)
    return 1


async def f06_keeps_the_flow_it_asked_for(nc: Client) -> int:
    subject = await fast_stream(nc, "F_F06")
    first = FastBatch(nc, flow=10)  # open on the stream: the next batch is granted a flow of 1
    await first.add(subject, b"x")
    batch = await RawFast(nc, subject).open()
    await batch.send(1, 0)
    await nc.flush()
    granted = (await batch.answer()).data
    assert b'"msgs":1}' in granted, granted  # the server's grant to a second batch on a stream
    for seq in range(2, 21):  # within two windows of 10, as if granted 10
        await batch.send(seq)
    await committed(batch, 21)
    await first.commit(subject, b"x")
    return 1  # the first batch is its own, conformant


async def f07_pings_ahead(nc: Client) -> int:
    batch = await RawFast(nc, await fast_stream(nc, "F_F07")).open()
    await batch.start()
    await within_windows(batch, 2, 5)
    await batch.send(9, 4)  # the highest sent is 5
    await nc.flush()
    await batch.answer()
    await committed(batch, 6)
    return 1


async def f08_stalls_without_a_ping(nc: Client) -> int:
    batch = await RawFast(nc, await fast_stream(nc, "F_F08")).open()
    await batch.start()
    await within_windows(batch, 2, 3)
    await asyncio.sleep(FAST_TIMEOUT * 1.6)  # the stall itself is the fault: no ping in it
    await batch.send(4)
    await batch.until("10208")
    await batch.close()
    return 1


async def f09_goes_on_after_10208(nc: Client) -> int:
    batch = await RawFast(nc, await fast_stream(nc, "F_F09")).open()  # never started: the server knows no such batch
    await batch.send(2)
    await batch.until("10208")
    for seq in range(3, 80):
        await batch.send(seq)
    await batch.close()
    return 1


async def f10_goes_on_after_a_fail_mode_end(nc: Client) -> int:
    batch = await RawFast(nc, await fast_stream(nc, "F_F10"), gap="fail").open()
    await batch.start()
    await within_windows(batch, 2, 3)
    await batch.send(4, headers={"Nats-Expected-Last-Sequence": "999"})  # fails: in fail mode the batch ends
    await batch.until('"batch"')
    for seq in range(5, 80):
        await batch.send(seq)
    await batch.close()
    return 1


async def f11_long_id(nc: Client) -> int:
    batch = await RawFast(nc, await fast_stream(nc, "F_F11"), batch_id="L" * 70).open()
    await batch.send(1, 0)
    await batch.answer()  # 10207
    await batch.close()
    return 1


async def f12_reuses_an_open_id(nc: Client) -> int:
    batch = await RawFast(nc, await fast_stream(nc, "F_F12")).open()
    await batch.start()
    await within_windows(batch, 2, 3)
    await batch.start()  # the same id while it is open
    await committed(batch, 4)
    return 1


# -- atomic --------------------------------------------------------------------------------------

def atomic_headers(batch_id: str, seq: int, **more: str) -> dict[str, str]:
    return {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(seq), **more}


async def _atomic(nc: Client, subject: str, batch_id: str, sequences: list[int], commit: str | None = "1",
                  first_request: bool = True, **commit_headers: str) -> None:
    for i, seq in enumerate(sequences):
        last = i == len(sequences) - 1 and commit is not None
        headers = atomic_headers(batch_id, seq, **({"Nats-Batch-Commit": commit, **commit_headers} if last else {}))
        if (i == 0 and first_request) or last:
            try:
                await nc.request(subject, b"x", timeout=3, headers=headers)
            except Exception:
                pass  # what the server answers is the collector's to read
        else:
            await nc.publish(subject, b"x", headers=headers)
    await nc.flush()


async def a01_first_message_not_a_request(nc: Client) -> int:
    await _atomic(nc, await atomic_stream(nc, "F_A01"), uuid.uuid4().hex, [1, 2, 3], first_request=False)
    return 1


async def a02_skips_a_sequence(nc: Client) -> int:
    await _atomic(nc, await atomic_stream(nc, "F_A02"), uuid.uuid4().hex, [1, 2, 4, 5])
    return 1


async def a03_bad_commit_value(nc: Client) -> int:
    await _atomic(nc, await atomic_stream(nc, "F_A03"), uuid.uuid4().hex, [1, 2, 3], commit="true")
    return 1


async def a04_eob_first(nc: Client) -> int:
    await _atomic(nc, await atomic_stream(nc, "F_A04"), uuid.uuid4().hex, [1], commit="eob",
                  **{"Nats-Required-Api-Level": "4"})
    return 1


async def a05_long_id(nc: Client) -> int:
    await _atomic(nc, await atomic_stream(nc, "F_A05"), "L" * 70, [1, 2])
    return 1


async def a06_too_large(nc: Client, max_msgs: int = 100) -> int:
    await _atomic(nc, await atomic_stream(nc, "F_A06"), uuid.uuid4().hex, list(range(1, max_msgs + 3)))
    return 1


async def a07_eob_without_api_level(nc: Client) -> int:
    await _atomic(nc, await atomic_stream(nc, "F_A07"), uuid.uuid4().hex, [1, 2, 3], commit="eob")
    return 1


async def a08_reuses_an_open_id(nc: Client) -> int:
    subject, batch_id = await atomic_stream(nc, "F_A08"), uuid.uuid4().hex
    await _atomic(nc, subject, batch_id, [1, 2], commit=None)
    await _atomic(nc, subject, batch_id, [1, 2, 3])  # message 1 again while the batch is open
    return 1


async def b01_retries_without_backing_off(nc: Client, helper: Client, inflight: int = 5) -> int:
    """The stream's open atomic batches are at the server's limit (kept alive by `helper`); the faulty
    client starts a new batch again at once whenever one is refused 10210."""
    subject = await atomic_stream(nc, "F_B01")
    held = [uuid.uuid4().hex for _ in range(inflight)]
    for batch_id in held:
        await _atomic(helper, subject, batch_id, [1], commit=None)
    attempts, deadline = 0, asyncio.get_running_loop().time() + 3.5
    keep, next_keep = 2, asyncio.get_running_loop().time()
    while asyncio.get_running_loop().time() < deadline:
        if asyncio.get_running_loop().time() >= next_keep:  # the held batches stay open (timeout 1 s)
            for batch_id in held:
                await helper.publish(subject, b"x", headers=atomic_headers(batch_id, keep))
            keep, next_keep = keep + 1, next_keep + 0.3
        attempts += 1
        try:
            await nc.request(subject, b"x", timeout=2, headers=atomic_headers(uuid.uuid4().hex, 1))
        except Exception:
            pass
    for batch_id in held:
        await _atomic(helper, subject, batch_id, [keep])
    return attempts


FAULTY = {"F01": f01_start_not_at_one, "F02": f02_does_not_wait, "F03": f03_skips_a_sequence,
          "F04": f04_changes_its_flow_token, "F05": f05_ignores_the_flow, "F06": f06_keeps_the_flow_it_asked_for,
          "F07": f07_pings_ahead, "F08": f08_stalls_without_a_ping, "F09": f09_goes_on_after_10208,
          "F10": f10_goes_on_after_a_fail_mode_end, "F11": f11_long_id, "F12": f12_reuses_an_open_id, "A01": a01_first_message_not_a_request, "A02": a02_skips_a_sequence,
          "A03": a03_bad_commit_value, "A04": a04_eob_first, "A05": a05_long_id, "A06": a06_too_large,
          "A07": a07_eob_without_api_level, "A08": a08_reuses_an_open_id}


async def _main(url: str, statements: list[str]) -> None:
    """Each statement's faulty publisher on a connection of its own, named faulty-<statement>; the
    connections stay open (a closed one cannot be named) until stdin closes."""
    import sys

    import nats

    clients = [await nats.connect(url, user="app", password="app-secret", name=f"faulty-{sid}") for sid in statements]
    try:
        await asyncio.gather(*(FAULTY[sid](nc) for sid, nc in zip(statements, clients)))
        print("published", flush=True)
        await asyncio.to_thread(sys.stdin.read)
    finally:
        for nc in clients:
            await nc.close()


if __name__ == "__main__":  # for the browser tests, which cannot run an event loop of their own
    import sys

    asyncio.run(_main(sys.argv[1], sys.argv[2:]))
