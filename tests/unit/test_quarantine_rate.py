"""The quarantine keeps at most its rate of refused inputs a second, whatever the flood."""

from __future__ import annotations

import pytest

from console.broker import quarantine as module
from console.broker.quarantine import Quarantine, QuarantineSettings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(module.time, "monotonic", clock)
    return clock


def newest_kept(q: Quarantine, n: int) -> int:
    return sum(1 for _ in range(n) if q.admit("bad") is not None)


def test_a_flood_keeps_the_rate_a_second_and_the_rest_is_counted(clock):
    q = Quarantine(None, QuarantineSettings(per_second=50, first_per_reason=0))  # type: ignore[arg-type]
    q.available = True
    assert newest_kept(q, 1_000) == 50  # the bucket starts full
    assert q.not_kept == 950
    clock.now += 0.01  # half a token
    assert newest_kept(q, 1_000) == 0
    clock.now += 0.011  # past one token since the bucket emptied
    assert newest_kept(q, 1_000) == 1
    clock.now += 10  # a long pause fills the bucket, never past its size
    assert newest_kept(q, 1_000) == 50
    kept = 0
    for _ in range(100):  # a steady flood over one second keeps about the rate, not more
        clock.now += 0.01
        kept += newest_kept(q, 100)
    assert 49 <= kept <= 51


@pytest.mark.parametrize("rate", [0.0, -5.0])
def test_a_rate_of_nothing_keeps_nothing(clock, rate):
    q = Quarantine(None, QuarantineSettings(per_second=rate, first_per_reason=0))  # type: ignore[arg-type]
    q.available = True
    assert newest_kept(q, 100) == 0
    clock.now += 100
    assert newest_kept(q, 100) == 0
