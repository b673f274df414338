"""The one backoff policy (console/backoff.py): doubling from its first wait to its most, starting over after
a success or a stable run, and no other module doubling a wait of its own."""

import asyncio
import re
from pathlib import Path

import pytest

from console.backoff import Backoff, keep_trying

CONSOLE = Path(__file__).resolve().parents[2] / "console"


def test_the_wait_doubles_to_its_most_and_starts_over_after_a_success():
    backoff = Backoff(first=0.5, most=3.0)
    assert [backoff.wait() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.wait() == 0.5
    assert backoff.after(0) == 0.0 and backoff.after(40) == 3.0  # no overflow however long it fails


def test_a_run_longer_than_stable_after_starts_over(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("console.backoff.time.monotonic", lambda: now[0])
    backoff = Backoff(first=1.0, most=30.0, stable_after=60.0)
    backoff.started()
    assert [backoff.wait() for _ in range(3)] == [1.0, 2.0, 4.0]  # failing at once, again and again
    backoff.started()
    assert not backoff.recovered
    now[0] += 61  # it ran a minute before failing: recovered
    assert backoff.recovered and backoff.failures == 3  # said so before its next failure (up's status bar)
    assert backoff.wait() == 1.0


def test_no_other_module_doubles_a_wait_of_its_own():
    doubling = re.compile(r"min\(\s*\w+\s*\*\s*2\b|\w+\s*\*=\s*2\b|sleep\(2\s*\*\*")
    found = [f"{p.relative_to(CONSOLE)}: {m.group(0)}" for p in CONSOLE.rglob("*.py") if p.name != "backoff.py"
             for m in doubling.finditer(p.read_text())]
    assert found == []


async def test_keep_trying_says_each_failure_of_its_kinds_waits_as_its_backoff_says_and_returns_the_answer():
    tries, said = [], []

    async def attempt() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionError(f"refused {len(tries)}")
        return "open"

    backoff = Backoff(first=0.01, most=0.02)
    assert await keep_trying(attempt, backoff, ConnectionError, lambda e, wait: said.append((str(e), wait))) == "open"
    assert said == [("refused 1", 0.01), ("refused 2", 0.02)]


async def test_keep_trying_lets_another_failure_through_and_a_stop_cuts_its_wait_short():
    async def broken() -> None:
        raise ValueError("not a kind it retries")

    with pytest.raises(ValueError):
        await keep_trying(broken, Backoff(), ConnectionError, lambda e, wait: None)

    stop = asyncio.Event()

    async def refused() -> None:
        stop.set()  # asked to stop while it fails: the hour's wait is not waited
        raise ConnectionError("refused")

    assert await asyncio.wait_for(keep_trying(refused, Backoff(first=3600), ConnectionError, lambda e, w: None,
                                              stop), 5) is None
