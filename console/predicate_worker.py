"""A search's predicate evaluated in a process of its own, so that no expression can stall the process
that asked (the web serves every user from one event loop) and the time limit is kept whatever the
expression: the worker looks at the clock before each message and answers with how far it got; one
that does not answer within STOP_AFTER of the limit is killed. A search that is cancelled (its page
closed, its session ended) kills it too.

Frames on the pipes are a 4-byte length and a body: pickled messages to the worker (the parent is
trusted), JSON back (the worker reads hostile payloads: what it says is parsed as data, never code)."""

from __future__ import annotations

import asyncio
import json
import pickle
import struct
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

NO_DECODER = "payload is null: the message is not JSON and no decoder reads this stream (give --decoders FILE): "
STOP_AFTER = 0.25  # seconds past the limit before an evaluation that did not end is killed
POLL = 0.1  # seconds between looks at `cancelled` while the worker evaluates
MAX_ANSWER = 1 << 20
MEMORY = 2 << 30  # bytes of address space the worker may take
NICE = 10  # the worker yields the CPU to the web, the collector and the server on the same machine

# (subject, seq, stored time in ns, headers, data): one message as the predicate may see it
Message = tuple[str, int, int, dict[str, str] | None, bytes]


@dataclass(frozen=True)
class Evaluated:
    evaluated: int  # messages evaluated, from the first: fewer than sent when the time ran out
    matched: frozenset[int]  # their indexes that matched
    errors: tuple[tuple[int, str], ...]  # (index, why) of those the expression could not be evaluated on


class PredicateWorker:
    """One process for one search's predicate."""

    def __init__(self, process: asyncio.subprocess.Process):
        self._process = process

    @classmethod
    async def start(cls, where: str, stream: str = "", decoders: str | None = None) -> PredicateWorker:
        """decoders: the operator's decoders file, read by the worker: `payload` is each message as its
        stream's decoder reads it (one that does not decode is an error of the search, with its reason)."""
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "console.predicate_worker", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        worker = cls(process)
        try:
            await worker._send(json.dumps({"where": where, "stream": stream, "decoders": decoders}).encode())
        except (ConnectionError, BrokenPipeError):
            await worker.close()
            raise
        return worker

    async def evaluate(self, messages: list[Message], seconds_left: float,
                       cancelled: Callable[[], bool] = lambda: False) -> Evaluated | None:
        """The predicate over `messages`, from the first, while time is left; None when the worker had to
        be killed (past the limit, or cancelled): what it was evaluating is not known."""
        # the clock runs from the call: a worker still starting, or slow to take a large batch off the
        # pipe, spends the search's time like an evaluation does
        stop_at = time.monotonic() + max(0.0, seconds_left) + STOP_AFTER
        try:
            body = pickle.dumps((seconds_left, messages), protocol=pickle.HIGHEST_PROTOCOL)
            await asyncio.wait_for(self._send(body), timeout=max(0.0, stop_at - time.monotonic()))
        except (ConnectionError, BrokenPipeError, asyncio.TimeoutError):
            await self.close()
            return None
        answer = asyncio.ensure_future(self._receive())
        try:
            while not answer.done():
                if cancelled() or time.monotonic() >= stop_at:
                    break
                await asyncio.wait((answer,), timeout=min(POLL, max(0.0, stop_at - time.monotonic())))
            if not answer.done():
                answer.cancel()
                await self.close()
                return None
            body = answer.result()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            await self.close()
            return None
        return _to_evaluated(body, len(messages))

    async def _send(self, body: bytes) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(struct.pack(">I", len(body)) + body)
        await stdin.drain()

    async def _receive(self) -> bytes:
        stdout = self._process.stdout
        assert stdout is not None
        size = struct.unpack(">I", await stdout.readexactly(4))[0]
        if size > MAX_ANSWER:
            raise ValueError("an answer too large")
        return await stdout.readexactly(size)

    async def close(self) -> None:
        if self._process.returncode is None:
            try:
                self._process.kill()
            except ProcessLookupError:
                pass
        await self._process.wait()


def _to_evaluated(body: bytes, sent: int) -> Evaluated | None:
    try:
        obj = json.loads(body)
        evaluated, matched, errors = int(obj["n"]), obj["matched"], obj["errors"]
        if not 0 <= evaluated <= sent or not all(type(i) is int and 0 <= i < evaluated for i in matched):
            return None
        return Evaluated(evaluated, frozenset(matched),
                         tuple((int(i), str(why)[:300]) for i, why in errors[:sent]))
    except (ValueError, KeyError, TypeError):
        return None


def _serve() -> None:
    """The worker: the expression, then batches of messages until its input closes."""
    import os
    import resource

    from pathlib import Path

    from console.decoders import DecodeError
    from console.decoders.rules import decoded_as, load_decoders
    from console.domain.search import PredicateError, Predicate, SearchRefused, message_context

    os.nice(NICE)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer

    def receive() -> bytes | None:
        head = stdin.read(4)
        if len(head) < 4:
            return None
        return stdin.read(struct.unpack(">I", head)[0])

    def send(obj: object) -> None:
        body = json.dumps(obj).encode()
        stdout.write(struct.pack(">I", len(body)) + body)
        stdout.flush()

    first = receive()
    if first is None:
        return
    asked = json.loads(first)
    try:
        predicate = Predicate(asked["where"])
    except SearchRefused:
        return  # the parent compiled it first: never here
    decoders = load_decoders(Path(asked["decoders"])) if asked["decoders"] else None  # the parent read it first
    stream = asked["stream"]
    needs, paths = predicate.needs, predicate.payload_paths
    while (body := receive()) is not None:
        seconds_left, messages = pickle.loads(body)
        deadline = time.monotonic() + seconds_left
        matched, errors, n = [], [], 0
        for n, (subject, seq, ns, headers, data) in enumerate(messages):
            if time.monotonic() >= deadline:
                break
            stored = datetime.fromtimestamp(ns / 1e9, timezone.utc)
            decoder = decoded_as(decoders, stream, subject, headers)
            try:
                decode = (lambda b, d=decoder, h=headers: d.decode(b, h, paths)) if decoder is not None else None
                if predicate.matches(message_context(subject, seq, stored, headers, data, needs, decode)):
                    matched.append(n)
            except PredicateError as e:
                errors.append((n, (NO_DECODER if decoder is None and (needs is None or "payload" in needs)
                                   and data.lstrip()[:1] not in (b"{", b"[") else "") + str(e)))
            except DecodeError as e:
                errors.append((n, f"not decoded: {e.reason}"))
        else:
            n = len(messages)
        send({"n": n, "matched": matched, "errors": errors})


if __name__ == "__main__":
    _serve()
