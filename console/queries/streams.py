"""The streams one reader may see, read through the process's StreamAdmin: the listing without the
others, and a stream it does not see answered as one that does not exist (its name is not confirmed)."""

from __future__ import annotations

from typing import Any

from console.domain.live_model import Sees
from console.errors import ConsoleError


class NoSuchStream(ConsoleError):
    """A stream the reader does not see, or that does not exist: the two are not told apart."""


class SeenAdmin:
    def __init__(self, admin: Any, sees: Sees):
        self._admin, self._sees = admin, sees

    def __getattr__(self, name: str) -> Any:  # read_only, server(): what concerns no stream
        return getattr(self._admin, name)

    @property
    def last_streams(self) -> list:
        return [s for s in getattr(self._admin, "last_streams", []) if self._sees(s.name)]

    async def streams(self) -> list:
        return [s for s in await self._admin.streams() if self._sees(s.name)]

    def _seen(self, stream: str) -> str:
        if not self._sees(stream):
            raise NoSuchStream(f"stream not found: {stream[:100]}")
        return stream

    async def stream(self, name: str) -> Any:
        return await self._admin.stream(self._seen(name))

    async def consumers(self, stream: str) -> list:
        return await self._admin.consumers(self._seen(stream))

    def reader(self, stream: str, *args: Any, **kwargs: Any) -> Any:
        return self._admin.reader(self._seen(stream), *args, **kwargs)

    async def replay_batch(self, stream: str, *args: Any, **kwargs: Any) -> Any:
        return await self._admin.replay_batch(self._seen(stream), *args, **kwargs)
