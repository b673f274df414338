"""How much CPU a collector process takes from the publishers it watches on a shared host.

`adaptive` (the CLI's default) runs the collector at nice 10 and, while it keeps up, in Linux's idle
scheduling class: it then runs only on CPU nobody else wants, so a publisher on the same cores keeps
its speed (nice alone still lets the collector delay a publisher that wakes for its ack). On a
saturated host the idle class would starve it and its taps would fall behind until the server cut
it off as a slow consumer, so it leaves the class as soon as its event loop runs late, and tries it
again a minute later. Where the class could not be left again (no CAP_SYS_NICE and RLIMIT_NICE
below 10, as in a default container), it is never entered.
"""

from __future__ import annotations

import logging
import os
import threading
from enum import Enum
from typing import Any

log = logging.getLogger(__name__)

NICE = 10
LATE = 0.25  # seconds an event-loop tick may be late before the collector counts as starved
RETRY_IDLE = 60.0


class CpuMode(str, Enum):
    ADAPTIVE = "adaptive"
    LOW = "low"  # nice 10
    NORMAL = "normal"


def _set_policy(policy: int) -> None:
    os.sched_setscheduler(0, policy, os.sched_param(0))  # 0: the calling thread only


def idle_class_can_be_left() -> bool:
    """Tried on a throwaway thread, whose scheduling is its own, so the process is untouched."""
    result: list[bool] = []

    def attempt() -> None:
        try:
            _set_policy(os.SCHED_IDLE)
            _set_policy(os.SCHED_OTHER)
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=attempt, name="idle-class-probe")
    thread.start()
    thread.join()
    return result[0]


class CpuPriority:
    """Applied to the calling (event-loop) thread by apply(); on_tick() is told how late each tick was."""

    def __init__(self, mode: CpuMode | str = CpuMode.ADAPTIVE):
        self.mode = CpuMode(mode)
        self.idle = False
        self.starved = 0  # times the idle class was left because the collector ran late
        self.note = ""
        self._left_at = 0.0
        self._nice_before: int | None = None

    def apply(self) -> None:
        if self.mode is CpuMode.NORMAL:
            return
        # At least nice 10, not 10 more each time: a process with a collector per system applies it once each
        self._nice_before = os.getpriority(os.PRIO_PROCESS, 0)
        if self._nice_before < NICE:
            os.setpriority(os.PRIO_PROCESS, 0, NICE)
        if self.mode is not CpuMode.ADAPTIVE:
            return
        if not hasattr(os, "SCHED_IDLE"):
            self.note = "no idle scheduling class on this system: nice 10 only"
        elif not idle_class_can_be_left():
            self.note = "the idle class could not be left again here (no CAP_SYS_NICE, RLIMIT_NICE < 10): nice 10 only"
        else:
            self._enter_idle()
        if self.note:
            log.info(self.note)

    def on_tick(self, lateness: float, now: float) -> None:
        if self.idle and lateness > LATE:
            _set_policy(os.SCHED_OTHER)
            self.idle, self._left_at = False, now
            self.starved += 1
            log.warning("ran %.2fs late in the idle class (the host is saturated): back to nice %d for %ds",
                        lateness, NICE, RETRY_IDLE)
        elif not self.idle and self.starved and now - self._left_at >= RETRY_IDLE:
            self._enter_idle()

    def for_stop(self) -> None:
        """A stopping collector drains and flushes at the priority it started with where it may take it back
        (root, CAP_SYS_NICE): at nice 10 on a saturated host its last writes could take minutes."""
        if self._nice_before is None:
            return
        if self.idle:
            _set_policy(os.SCHED_OTHER)
            self.idle = False
        try:
            os.setpriority(os.PRIO_PROCESS, 0, self._nice_before)
        except OSError:  # not allowed here: it stops at nice 10
            pass

    def _enter_idle(self) -> None:
        _set_policy(os.SCHED_IDLE)
        self.idle = True

    def status(self) -> dict[str, Any]:
        scheduling = "idle class" if self.idle else ("normal" if self.mode is CpuMode.NORMAL else f"nice {NICE}")
        return {"mode": self.mode.value, "now": scheduling, "left_idle_starved": self.starved, "note": self.note}
