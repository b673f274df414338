"""The one reader of the operator's TOML files (alert rules, masking rules, roles): a text that is not
TOML, or nests deeper than the parser can follow, is one error with its line, never a crash."""

from __future__ import annotations

import re
import tomllib
from datetime import timedelta
from typing import Any, Callable, Iterator

_DURATION = re.compile(r"(\d{1,6})(s|m|h|d)")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class FileRefused(ValueError):
    """An operator's file the console refuses: `line` is where the problem is (None when unknown)."""

    def __init__(self, reason: str, line: int | None = None):
        super().__init__(f"line {line}: {reason}" if line else reason)
        self.reason, self.line = reason, line


def read_toml(text: str, refused: Callable[[str, int | None], Exception]) -> dict[str, Any]:
    """The document, or `refused(reason, line)` raised: "not TOML: ..." and its line when known."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        found = re.search(r"line (\d+)", str(e))
        raise refused(f"not TOML: {str(e).split(' (at line')[0][:200]}", int(found[1]) if found else None) from None
    except RecursionError:  # tomllib recurses once per nested array or table
        raise refused("not TOML: nested too deeply", None) from None


def with_lines(text: str, name: str, tables: list[Any]) -> Iterator[tuple[Any, int | None]]:
    """Each of the document's [[name]] tables with the line of its header (tomllib keeps no positions),
    where an error in it is said to be; None when the text has fewer such headers than tables."""
    lines: list[int | None] = [n for n, line in enumerate(text.splitlines(), 1)
                               if re.match(rf"\s*\[\[\s*{name}\s*\]\]", line)]
    return zip(tables, lines + [None] * (len(tables) - len(lines)))


def duration(text: object, key: str, line: int | None,
             refused: Callable[[str, int | None], Exception] = FileRefused) -> timedelta:
    """A span written as 30s, 5m, 1h or 1d (rules, objectives, the CLI's --since); else `refused(reason, line)`."""
    if not isinstance(text, str) or not (m := _DURATION.fullmatch(text.strip())) or int(m[1]) == 0:
        raise refused(f"{key} must be a duration like 30s, 5m, 1h or 1d, not {str(text)[:40]!r}", line)
    return timedelta(seconds=int(m[1]) * _UNITS[m[2]])


def duration_text(span: timedelta) -> str:
    """A span as duration() reads it back (in its largest whole unit)."""
    seconds = int(span.total_seconds())
    for unit in ("d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"
