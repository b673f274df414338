"""`batch-console search STREAM`: a bounded search of any stream (console/domain/search.py says what
a query may hold), its matches as JSON lines on stdout, its progress every second on stderr (a bar on
a terminal's width of the scan limit, else a line), and how it ended."""

from __future__ import annotations

import json
import sys
from typing import Any

from console.config import Settings
from console.domain.audit import CLI
from console.domain.search import NEWEST, Found, SearchProgress, SearchQuery, SearchRefused, search_time
from console.commands import ExportSearch
from console.export import found_row


def found_json(f: Found) -> str:
    """One match: the payload as text when it is UTF-8, else base64 (never raw bytes on a terminal)."""
    row = found_row(f)
    return json.dumps({**row, "headers": dict(f.headers)}, ensure_ascii=True)


def on_match_printed(f: Found) -> None:
    print(found_json(f))


def query_from(args: Any) -> SearchQuery:
    """The command's arguments as a query; SearchRefused says which one is wrong."""
    return SearchQuery(args.stream, subject=args.subject or "", start_seq=args.from_seq, end_seq=args.to_seq,
                       since=search_time(args.since), until=search_time(args.until), where=args.where or "",
                       direction="newest" if args.newest_first else "oldest", max_scanned=args.max_scanned,
                       max_bytes=args.max_bytes, max_matches=args.max_matches, max_seconds=args.max_seconds)


async def run_search(settings: Settings, args: Any) -> int:
    """0: the search ran (its end on stderr); 2: the query refused; 3: the server not reachable."""
    from console.errors import ConsoleError
    from console.commands import RunSearch
    from console.runtime import Runtime, check_files

    try:
        query = query_from(args)
    except SearchRefused as e:
        print(f"batch-console search: {e.reason}", file=sys.stderr)
        return 2

    def progress(state: SearchProgress) -> None:
        print(f"\r{state.line()}" if sys.stderr.isatty() else state.line(), end="" if sys.stderr.isatty() else "\n",
              file=sys.stderr, flush=True)

    try:
        check_files(settings)  # masking, decoders, roles: an error with its line, before any search
        async with await Runtime.open(settings, give_up_after=settings.connection.connect_timeout,
                                      allow_reconnect=False) as runtime:
            actions = runtime.actions(CLI)
            if args.output:  # the action export.search: the matches streamed into the file as they are found
                _, state = await actions.run(ExportSearch(query, args.format, path=args.output, progress=progress))
            else:
                found, state = await actions.run(RunSearch(query, progress, on_match=None if query.direction == NEWEST
                                                           else on_match_printed))
                for f in found if query.direction == NEWEST else ():  # newest first: kept to be ordered
                    print(found_json(f))
    except (ConsoleError, OSError, TimeoutError, ValueError) as e:
        print(f"batch-console search: {str(e)[:300]}", file=sys.stderr)
        return 3
    if sys.stderr.isatty():  # the last progress line, how it ended, stays
        print(file=sys.stderr)
    for said in state.error_sample:  # the first few the expression could not be evaluated on, and why
        print(f"not evaluated: {said}", file=sys.stderr)
    return 0
