"""The search service under the search.run command: one search at a time per user (its browser sessions, a
token's calls), a bound per process; each stops when asked, or when the actor's session ends; payloads
masked for whoever asks."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from console.broker.connection import Connection
from console.errors import BusyError

if TYPE_CHECKING:
    from console.commands import Asker
    from console.decoders.rules import Decoders
    from console.payloads import Payloads
    from console.domain.search import Found, SearchProgress, SearchQuery

# Searches at once in one process: each has a worker process of its own, and more than one a core
# starved the server itself on a 2-core machine (its requests timed out)
MAX_SEARCHES = max(2, os.cpu_count() or 2)


class Searches:
    def __init__(self, connection: Callable[[], Connection], payloads: Callable[[Callable[[str], str]], Payloads],
                 decoders: Callable[[], Decoders | None] = lambda: None):
        """payloads: the pipeline for a reader's level; decoders: the operator's decoders file as read here
        (the pipeline's), whose name each search's worker reads again."""
        self._connection, self._payloads, self._decoders = connection, payloads, decoders
        self._running: set[str] = set()  # the users (a token's name, a signed-in user) whose search runs now

    async def __call__(self, asker: Asker, query: SearchQuery, progress: Callable[[SearchProgress], None] | None,
                       cancelled: Callable[[], bool], on_match: Callable[[Found], None] | None
                       ) -> tuple[list[Found], SearchProgress]:
        from console.broker.search import search

        decoders = self._decoders()
        shown = self._payloads(asker.payloads).shown(query.stream)
        whose = asker.actor.user or str(id(asker))  # a user's sessions, a token's calls: one search at a time,
        if whose in self._running:  # so no one caller holds every slot and refuses everyone else
            raise BusyError(f"a search of {whose[:80]} is running: cancel it or wait for it first")
        if len(self._running) >= MAX_SEARCHES:
            raise BusyError(f"the console runs {MAX_SEARCHES} searches already: try again when one ends")
        self._running.add(whose)
        try:
            return await search(self._connection(), query, progress, lambda: cancelled() or asker.ended, shown,
                                on_match, decoders.source if decoders is not None else None)
        finally:
            self._running.discard(whose)
