"""The one reader of the operator's TOML files (alert rules, masking rules, roles): a text that is not
TOML, or nests deeper than the parser can follow, is one error with its line, never a crash."""

from __future__ import annotations

import re
import tomllib
from typing import Any, Callable


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


def table_lines(text: str, table: str) -> list[int]:
    """The line of each [[table]] header, in order: where an error in the n-th table is said to be."""
    return [n for n, line in enumerate(text.splitlines(), 1) if re.match(rf"\s*\[\[\s*{table}\s*\]\]", line)]
