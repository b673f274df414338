"""Each test group's seconds (setup, call and teardown of its tests, summed), from the log of a run with
`--durations=0`, into tests/durations.json: where the suite's time goes, group by group (a group is what one
parallel worker runs together: tests/conftest.py's `_group`).

    bash scripts/test.sh -q --durations=0 > run.log; .venv/bin/python scripts/test_durations.py run.log
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

LINE = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+)@(\S+?)(?:\[.*)?$")
OUT = Path(__file__).resolve().parents[1] / "tests" / "durations.json"


def group_seconds(lines: list[str]) -> dict[str, float]:
    seconds: Counter[str] = Counter()
    for line in lines:
        if (m := LINE.match(line)) is not None:
            seconds[m[3]] += float(m[1])
    return {group: round(s, 1) for group, s in seconds.most_common()}


def main() -> None:
    found = group_seconds(Path(sys.argv[1]).read_text(errors="replace").splitlines())
    if not found:
        sys.exit("no durations in that log: run pytest with --durations=0")
    OUT.write_text(json.dumps(found, indent=1) + "\n")
    print(f"{len(found)} groups, {sum(found.values()):,.0f} s in all, written to {OUT}")


if __name__ == "__main__":
    main()
