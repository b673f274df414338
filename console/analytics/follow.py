"""`analytics --follow`: one warm Spark session that runs as soon as a loss reaches the event log, and
on its timer for everything else.

A watch on the loss kinds' subjects (console.broker.log_watcher) wakes the loop; clean batches,
heartbeats, canaries and consumer lag wait for the timer (`every`), so a log that is quiet but not
empty (a canary each minute, a reader's lag every 10 s) costs a Spark run per `every`, not per event.
A wake-up is only a hint: every run pins its range from the stored offset and the log's last sequence,
so a forged publish on those subjects costs at most an empty run, a missed one is caught by the next
`every`, and exactly-once is the job's as in any run.
"""

from __future__ import annotations

import time
from typing import Callable

from console.broker.log_watcher import AnyOf, LogWatcher
from console.domain.events import LOST_KINDS, EventKind

# What wakes a following job at once: the losses and their retractions (whose context History shows),
# and a window the collector could not see
WAKES_FOLLOW = (*LOST_KINDS, EventKind.LOSS_RETRACTED, EventKind.CAPTURE_INTERRUPTED)

# A timed run finding only the collector's heartbeat leaves it to the next run, up to this many
# sequences (at one heartbeat each 5 s, over an hour of an idle log): an idle log costs no Spark job.
HEARTBEATS_DEFERRED = 1_000


# A burst of events is one run: the run waits until the log has been quiet this long (a demo round, a
# publisher's batches ending one after another), and at most SETTLE_AT_MOST past the gap (a steady flow).
SETTLE = 2.0
SETTLE_AT_MOST = 5.0


def follow(run: Callable[[], None], watcher: LogWatcher | AnyOf, every: float, gap: float) -> None:
    """Run, then again as soon as events arrive and have settled (SETTLE s without another), but no
    sooner than `gap` seconds after the last run began and no later than SETTLE_AT_MOST past it
    (History trails Live by about the gap plus a run), and at least every `every` seconds. Until
    interrupted."""
    while True:
        began = time.monotonic()
        run()
        if watcher.wait(every):
            settled(watcher, began + gap)


def settled(watcher: LogWatcher | AnyOf, earliest: float) -> None:
    """Returns at `earliest` or later, once nothing has arrived for SETTLE s, or SETTLE_AT_MOST s past `earliest`."""
    latest = earliest + SETTLE_AT_MOST
    while True:
        now = time.monotonic()
        if now >= latest or (now >= earliest and now - watcher.last_arrival >= SETTLE):
            return
        time.sleep(min(latest, max(earliest, watcher.last_arrival + SETTLE)) - now)
