"""Every consumer as one reader may see it: those of streams its roles do not see left out (their names,
numbers and the reasons they were not read), the one rule of every face (console.queries.sight)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from console.queries.sight import Sight

if TYPE_CHECKING:
    from console.consumers import ConsumerWatch, Reading


class SeenConsumers:
    def __init__(self, watch: ConsumerWatch, sight: Sight):
        self.watch, self.sight = watch, sight

    async def read(self, stream: str | None = None, fresh_within: float | None = None) -> Reading:
        """The last judgement of every consumer the reader sees (of one stream, when given)."""
        found = await (self.watch.read() if fresh_within is None else self.watch.read(fresh_within=fresh_within))
        return self.seen(found, stream)

    def seen(self, found: Reading, stream: str | None = None) -> Reading:
        def wanted(s: str) -> bool:
            return self.sight.sees(s) and (stream is None or s == stream)

        return replace(found, judged=[j for j in found.judged if wanted(j.read.stream)],
                       unread={s: why for s, why in found.unread.items() if wanted(self._stream_of(s))})

    def _stream_of(self, unread: str) -> str:
        """The stream an unread entry names: a leaf's is DOMAIN:STREAM ('domain D' for a whole domain)."""
        for domain in self.watch.domains:
            if domain and unread.startswith(f"{domain}:"):
                return unread[len(domain) + 1:]
        return unread
