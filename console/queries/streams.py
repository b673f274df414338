"""The server's streams as one reader may read them, through the process's StreamAdmin: the listing
without the others, a stream it does not see answered as one that does not exist (its name is not
confirmed), and nothing that changes the server: edits, durable fetches and acks are commands
(console.commands), which the page's actions run."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from console.errors import ConsoleError


class NoSuchStream(ConsoleError):
    """A stream the reader does not see, or that does not exist: the two are not told apart."""


class StreamReads:
    def __init__(self, admin: Any, sees: Callable[[str | None], bool] | None = None):
        self._admin, self._sees = admin, sees  # sees None: every stream

    @property
    def read_only(self) -> bool:
        return bool(self._admin.read_only)

    async def server(self) -> Any:
        return await self._admin.server()

    def _seen_name(self, name: str) -> bool:
        return self._sees is None or self._sees(name)

    @property
    def last_streams(self) -> list[Any]:
        return [s for s in getattr(self._admin, "last_streams", []) if self._seen_name(s.name)]

    async def streams(self) -> list[Any]:
        return [s for s in await self._admin.streams() if self._seen_name(s.name)]

    def _seen(self, stream: str) -> str:
        if not self._seen_name(stream):
            raise NoSuchStream(f"stream not found: {stream[:100]}")
        return stream

    async def stream(self, name: str) -> Any:
        return await self._admin.stream(self._seen(name))

    async def consumers(self, stream: str) -> list[Any]:
        return list(await self._admin.consumers(self._seen(stream)))

    def peek(self, stream: str, start_seq: int | None = None, start_time: datetime | None = None) -> Any:
        """An ordered peek (an ephemeral consumer without acks): it changes nothing, so it is no command."""
        return self._admin.reader(self._seen(stream), None, start_seq=start_seq, start_time=start_time)

    async def replay_batch(self, stream: str, *args: Any, **kwargs: Any) -> Any:
        return await self._admin.replay_batch(self._seen(stream), *args, **kwargs)
