"""analytics --follow's wait between runs: a burst of events is one run, a steady flow still runs."""

import threading
import time

from console.analytics import follow


class Watcher:
    last_arrival = 0.0


def arrivals(watcher: Watcher, every: float, until: float) -> threading.Thread:
    def publish():
        while time.monotonic() < until:
            watcher.last_arrival = time.monotonic()
            time.sleep(every)
    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    return thread


def test_a_quiet_log_runs_at_the_gap(monkeypatch):
    monkeypatch.setattr(follow, "SETTLE", 0.3)
    watcher = Watcher()
    watcher.last_arrival = time.monotonic() - 10
    start = time.monotonic()
    follow.settled(watcher, start + 0.2)
    assert 0.2 <= time.monotonic() - start < 0.5


def test_a_burst_is_waited_out_before_the_run(monkeypatch):
    monkeypatch.setattr(follow, "SETTLE", 0.3)
    monkeypatch.setattr(follow, "SETTLE_AT_MOST", 5.0)
    watcher = Watcher()
    start = time.monotonic()
    arrivals(watcher, 0.05, start + 1.0).join(0)  # a burst of 1 s, past the gap (0.2 s)
    follow.settled(watcher, start + 0.2)
    ended = time.monotonic()
    assert ended - watcher.last_arrival >= 0.3 and ended - start >= 1.0


def test_a_steady_flow_runs_at_most_settle_at_most_past_the_gap(monkeypatch):
    monkeypatch.setattr(follow, "SETTLE", 0.3)
    monkeypatch.setattr(follow, "SETTLE_AT_MOST", 0.6)
    watcher = Watcher()
    start = time.monotonic()
    arrivals(watcher, 0.05, start + 10)
    follow.settled(watcher, start + 0.2)
    assert 0.8 <= time.monotonic() - start < 1.2
