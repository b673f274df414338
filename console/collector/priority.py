"""How much CPU a collector process takes from the publishers it watches on a shared host.

`adaptive` (the CLI's default) runs the collector at nice 10 and, while it keeps up, in Linux's idle
scheduling class: it then runs only on CPU nobody else wants, so a publisher on the same cores keeps
its speed (nice alone still lets the collector delay a publisher that wakes for its ack). On a
saturated host the idle class would starve it and its taps would fall behind until the server cut
it off as a slow consumer, so it leaves the class as soon as its event loop runs late, and tries it
again a minute later. Where the class could not be left again (no CAP_SYS_NICE and RLIMIT_NICE
below 10, as in a default container), it is never entered.

Behind a flood (far more sent by the server than read: a hostile client's replies, on a host whose cores
it keeps busy), nice 10 starves the collector as the idle class would: a real loss in the flood waits
behind every reply of it, and the server cuts a consumer that stays behind off. So while behind it takes
back the priority it started with, where it may (root, CAP_SYS_NICE), and gives it up a minute after.

These are decided by a watcher thread made before the event loop's thread gives its priority up, so at the
priority the collector started with: a starved loop cannot look at its own clock, and in the idle class on
a busy host it would run again only after the server had cut it off as a slow consumer (10 s of not reading).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from enum import Enum
from typing import Any, Callable

log = logging.getLogger(__name__)

NICE = 10
LATE = 0.25  # seconds an event-loop tick may be late before the collector counts as starved
WATCH_EVERY = 0.1  # seconds between the watcher's looks
RETRY_IDLE = 60.0
BEHIND_BYTES = 1 << 20  # unread from the server past which the collector is behind (about 15,000 replies)
BEHIND_LOOKS = 3  # looks in a row that find it behind before it takes its priority back (not a burst's)


class CpuMode(str, Enum):
    ADAPTIVE = "adaptive"
    LOW = "low"  # nice 10
    NORMAL = "normal"


def _set_policy(policy: int, thread: int = 0) -> None:
    os.sched_setscheduler(thread, policy, os.sched_param(0))  # a thread's own (0: the calling thread)


def _set_nice(nice: int, thread: int = 0) -> None:
    os.setpriority(os.PRIO_PROCESS, thread, nice)  # on Linux, a thread's own


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
    """Applied to the calling (event-loop) thread by apply(); on_tick() is told how late its tick is and
    whether it is behind, by the watcher thread (watch) or a caller."""

    def __init__(self, mode: CpuMode | str = CpuMode.ADAPTIVE):
        self.mode = CpuMode(mode)
        self.idle = False
        self.starved = 0  # times the idle class was left because the collector ran late
        self.note = ""
        self._left_at = 0.0
        self._nice_before: int | None = None
        self.behind = 0  # times it took its priority back, behind a flood
        self.taken_back = False
        self._behind_at = 0.0
        self._behind_looks = 0
        self._thread = 0  # the event loop's, once applied
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def apply(self, due: Callable[[], float] | None = None, behind: Callable[[], bool] | None = None) -> None:
        """`due`: when the event loop's next tick is due (time.monotonic); `behind`: whether its connections
        are behind the server. With them, a watcher thread looks every WATCH_EVERY seconds."""
        if self.mode is CpuMode.NORMAL:
            return
        self._thread = threading.get_native_id()
        if due is not None and behind is not None:  # made first: it keeps the priority the loop gives up
            self._watcher = threading.Thread(target=self._watch, args=(due, behind), name="cpu-priority", daemon=True)
            self._watcher.start()
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

    def _watch(self, due: Callable[[], float], behind: Callable[[], bool]) -> None:
        while not self._stop.wait(WATCH_EVERY):
            try:
                now = time.monotonic()
                self.on_tick(max(0.0, now - due()), now, behind())
            except Exception:  # a look that failed; the next one is a tenth of a second away
                log.exception("CPU priority watcher")

    def on_tick(self, lateness: float, now: float, behind: bool = False) -> None:
        """`behind`: the server has sent far more than the collector has read (BEHIND_BYTES), BEHIND_LOOKS
        looks in a row before it counts."""
        self._behind_looks = self._behind_looks + 1 if behind else 0
        if self._behind_looks >= BEHIND_LOOKS:
            self._take_back(now)
        elif self.taken_back:
            if not behind and now - self._behind_at >= RETRY_IDLE:
                self._give_up_again()
        elif self.idle and lateness > LATE:
            _set_policy(os.SCHED_OTHER, self._thread)
            self.idle, self._left_at = False, now
            self.starved += 1
            log.warning("ran %.2fs late in the idle class (the host is saturated): back to nice %d for %ds",
                        lateness, NICE, RETRY_IDLE)
        elif not self.idle and self.starved and not behind and now - self._left_at >= RETRY_IDLE:
            self._enter_idle()

    def _take_back(self, now: float) -> None:
        if self._nice_before is None:  # NORMAL: never given up
            return
        self._behind_at = now  # each tick behind puts the return off
        if self.taken_back:
            return
        self.taken_back, self.behind = True, self.behind + 1
        if self.idle:
            _set_policy(os.SCHED_OTHER, self._thread)
            self.idle = False
        try:
            _set_nice(min(self._nice_before, NICE), self._thread)
        except OSError:  # not allowed here: out of the idle class, at nice 10
            pass
        log.warning("behind the server (a flood?): took its priority back, now nice %d, until a minute after",
                    os.getpriority(os.PRIO_PROCESS, self._thread))

    def _give_up_again(self) -> None:
        self.taken_back = False
        try:
            _set_nice(max(os.getpriority(os.PRIO_PROCESS, self._thread), NICE), self._thread)
        except OSError:
            pass
        if self.mode is CpuMode.ADAPTIVE and not self.note:
            self._enter_idle()

    def for_stop(self) -> None:
        """A stopping collector drains and flushes at the priority it started with where it may take it back
        (root, CAP_SYS_NICE): at nice 10 on a saturated host its last writes could take minutes."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(2 * WATCH_EVERY + 1)
        if self._nice_before is None:
            return
        if self.idle:
            _set_policy(os.SCHED_OTHER, self._thread)
            self.idle = False
        try:
            _set_nice(self._nice_before, self._thread)
        except OSError:  # not allowed here: it stops at nice 10
            pass

    def _enter_idle(self) -> None:
        _set_policy(os.SCHED_IDLE, self._thread)
        self.idle = True

    def status(self) -> dict[str, Any]:
        scheduling = "idle class" if self.idle else ("normal" if self.mode is CpuMode.NORMAL else
                                                     f"nice {os.getpriority(os.PRIO_PROCESS, self._thread)}")
        return {"mode": self.mode.value, "now": scheduling, "left_idle_starved": self.starved,
                "took_back_behind": self.behind, "note": self.note}
