"""The search service under the search.run command: one search at a time per actor (a browser
session), a bound per process; each stops when asked, or when the actor's session ends; payloads
masked for whoever asks."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from console.broker.connection import Connection
from console.errors import BusyError

if TYPE_CHECKING:
    from console.actions import Actions
    from console.decoders.rules import Decoders
    from console.domain.masking import Masking
    from console.domain.search import Found, SearchProgress, SearchQuery

# Searches at once in one process: each has a worker process of its own, and more than one a core
# starved the server itself on a 2-core machine (its requests timed out)
MAX_SEARCHES = max(2, os.cpu_count() or 2)


class Searches:
    def __init__(self, connection: Callable[[], Connection], masking: Callable[[], Masking],
                 decoders: Callable[[], Decoders | None] = lambda: None):
        """decoders: the operator's decoders file as read here (the masking's); each search's worker reads
        the same file again, by its name."""
        self._connection, self._masking, self._decoders = connection, masking, decoders
        self._running: set[int] = set()  # the actors (id of their Actions) whose search runs now

    async def __call__(self, asker: Actions, query: SearchQuery, progress: Callable[[SearchProgress], None] | None,
                       cancelled: Callable[[], bool], on_match: Callable[[Found], None] | None
                       ) -> tuple[list[Found], SearchProgress]:
        from console.broker.search import search

        from console.decoders.rules import pick

        decoders = self._decoders()
        shown = self._masking().shown(query.stream, asker.payloads(query.stream), pick(decoders))
        if id(asker) in self._running:
            raise BusyError("a search of this session is running: cancel it or wait for it first")
        if len(self._running) >= MAX_SEARCHES:
            raise BusyError(f"the console runs {MAX_SEARCHES} searches already: try again when one ends")
        self._running.add(id(asker))
        try:
            return await search(self._connection(), query, progress, lambda: cancelled() or asker.ended, shown,
                                on_match, decoders.source if decoders is not None else None)
        finally:
            self._running.discard(id(asker))
