"""A publisher of atomic batches back to back (three messages and a commit each) that follows
maintenance holds: what the maintenance tests publish while leaders move and nodes restart."""

from __future__ import annotations

import asyncio

import nats

from console.broker.atomic import AtomicBatch
from console.errors import BatchError


class SteadyPublisher:
    def __init__(self, nc, subject: str, holds=None):
        self.nc, self.subject, self.holds = nc, subject, holds
        self.committed = self.lost = 0
        self.held: list[int] = []  # each batch's holds waited for
        self._running = True
        self._task: asyncio.Future | None = None

    def start(self) -> SteadyPublisher:
        self._task = asyncio.ensure_future(self._run())
        return self

    async def stop(self) -> None:
        self._running = False
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while self._running:
            batch = AtomicBatch(self.nc, holds=self.holds, timeout=5.0)
            try:
                for _ in range(3):
                    await batch.add(self.subject, b"m")
                    await asyncio.sleep(0.02)
                await batch.commit(self.subject, b"end")
                self.committed += 1
            except (BatchError, nats.errors.Error, asyncio.TimeoutError):
                self.lost += 1
                batch.discard()
            self.held.append(batch.held)
