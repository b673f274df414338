"""The collector's CPU priority, on the real kernel scheduler: idle class while it keeps up, nice 10
when starved, never an idle class it could not leave."""

import asyncio
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from console.broker.fast import FastBatch
from console.collector.priority import NICE, CpuPriority, idle_class_can_be_left
from console.domain.events import EventKind, event_from_json
from tests.waits import wait_until

CLI = [str(Path(sys.executable).parent / "batch-console"), "collect"]
can_leave_idle = pytest.mark.skipif(not idle_class_can_be_left(), reason="needs CAP_SYS_NICE or RLIMIT_NICE >= 10")


def start_collector(url: str, log_path: Path, wrapper: list[str] = ()) -> subprocess.Popen:
    with open(log_path, "w") as err:
        return subprocess.Popen([*wrapper, *CLI, "--server", url, "--data-dir", str(log_path.parent)], stderr=err)


async def started(proc: subprocess.Popen, log_path: Path) -> None:
    await wait_until(lambda: "collecting into" in log_path.read_text() or proc.poll() is not None, timeout=30)
    assert proc.poll() is None, log_path.read_text()


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    assert proc.wait(timeout=30) == 0


def busy_cores(count: int) -> list[subprocess.Popen]:
    """Busy loops at normal priority, as a saturated host or a flooding client keeps its cores."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def idle_cores(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        hog.kill()


@can_leave_idle
def test_a_collector_per_system_makes_its_process_nice_10_once_and_a_stopping_one_takes_it_back():
    seen = []

    def on_a_thread_of_its_own():  # niceness is per thread on Linux: the test process is untouched
        before = os.getpriority(os.PRIO_PROCESS, 0)
        collectors = [CpuPriority("low") for _ in range(3)]  # collect --systems: one per system, one thread
        for cpu in collectors:
            cpu.apply()
            seen.append(os.getpriority(os.PRIO_PROCESS, 0))
        for cpu in reversed(collectors):  # stopping: drained and flushed at the priority it started with
            cpu.for_stop()
        seen.append(os.getpriority(os.PRIO_PROCESS, 0) == before)

    thread = threading.Thread(target=on_a_thread_of_its_own)
    thread.start()
    thread.join()
    assert seen == [NICE, NICE, NICE, True]  # not 10 more for each: was nice 19 with two systems


@can_leave_idle
def test_adaptive_priority_leaves_the_idle_class_when_late_and_tries_it_again_a_minute_later():
    seen = []

    def on_a_thread_of_its_own():  # scheduling is per thread: the test process is untouched
        cpu = CpuPriority("adaptive")
        cpu.apply()
        for lateness, now in [(0.1, 0.0), (0.3, 1.0), (0.0, 30.0), (0.0, 61.0)]:
            cpu.on_tick(lateness, now)
            seen.append(os.sched_getscheduler(0))
        seen.append(cpu.status())

    thread = threading.Thread(target=on_a_thread_of_its_own)
    thread.start()
    thread.join()
    assert seen[:4] == [os.SCHED_IDLE, os.SCHED_OTHER, os.SCHED_OTHER, os.SCHED_IDLE]
    assert seen[4]["left_idle_starved"] == 1 and seen[4]["now"] == "idle class"


@pytest.mark.alone  # it keeps every core busy on purpose: beside the parallel run it would starve the others
@can_leave_idle
async def test_a_starved_collector_leaves_the_idle_class_and_misses_no_ack(nats_server, nc, make_stream, tmp_path):
    _, subject = await make_stream(allow_batched=True)
    log_path = tmp_path / "collect.log"
    proc, hogs = start_collector(nats_server.url, log_path), []
    try:
        await started(proc, log_path)
        assert os.sched_getscheduler(proc.pid) == os.SCHED_IDLE
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == NICE
        acks, committed = {}, asyncio.Event()

        async def on_event(msg):
            event = event_from_json(msg.data)
            if event.kind is EventKind.FAST_PROGRESS:
                acks[event.batch_id] = acks.get(event.batch_id, 0) + event.acks
            elif event.kind is EventKind.FAST_COMMITTED:
                committed.set()

        await nc.subscribe("batch_console.events.>", cb=on_event)
        # Every core busy at normal priority: the idle class alone would starve the collector.
        hogs = busy_cores(2 * (os.cpu_count() or 1))
        batch = FastBatch(nc, flow=10)
        for _ in range(49_999):
            await batch.add(f"{subject}.x", b"x" * 64)
        await batch.commit(f"{subject}.x", b"x")
        await asyncio.wait_for(committed.wait(), 60)
        assert acks[batch.batch_id] == batch.acks
        # Starved (late on its clock), or behind (the server's bytes piling up unread): whichever it saw first.
        await wait_until(lambda: any(said in log_path.read_text() for said in ("back to nice 10", "took its priority back")),
                         30, "the collector left the idle class")
        assert os.sched_getscheduler(proc.pid) == os.SCHED_OTHER
    finally:
        idle_cores(hogs)
        stop(proc)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="drops CAP_SYS_NICE with setpriv, as root")
async def test_without_cap_sys_nice_the_collector_never_enters_the_idle_class(nats_server, tmp_path):
    log_path = tmp_path / "collect.log"
    proc = start_collector(nats_server.url, log_path, wrapper=["setpriv", "--bounding-set", "-sys_nice"])
    try:
        await started(proc, log_path)
        assert os.sched_getscheduler(proc.pid) == os.SCHED_OTHER
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == NICE
        assert "could not be left again" in log_path.read_text()
    finally:
        stop(proc)


@can_leave_idle
def test_behind_a_flood_the_collector_takes_its_priority_back_and_gives_it_up_a_minute_after():
    seen = []

    def on_a_thread_of_its_own():  # scheduling and niceness are per thread: the test process is untouched
        before = os.getpriority(os.PRIO_PROCESS, 0)
        cpu = CpuPriority("adaptive")
        cpu.apply()
        for behind, now in [(True, 0.0), (True, 0.1), (False, 0.2), (True, 0.3), (True, 0.4), (True, 0.5),
                            (True, 30.0), (False, 80.0), (False, 91.0)]:
            cpu.on_tick(0.0, now, behind)
            seen.append((os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)))
        seen.append((before, cpu.status()))

    thread = threading.Thread(target=on_a_thread_of_its_own)
    thread.start()
    thread.join()
    before, status = seen[9]
    taken_back = before if os.geteuid() == 0 else NICE  # lowering a nice needs CAP_SYS_NICE
    # behind three looks in a row (not a burst's two): out of the idle class at its first nice; a minute
    # after the last look behind, idle at nice 10 again
    assert seen[:5] == [(os.SCHED_IDLE, NICE)] * 5
    assert seen[5:9] == [(os.SCHED_OTHER, taken_back)] * 3 + [(os.SCHED_IDLE, NICE)]
    assert status["took_back_behind"] == 1 and status["now"] == "idle class"


@pytest.mark.alone  # as above: the cores busy on purpose
@can_leave_idle
async def test_a_flood_that_leaves_the_collector_behind_gives_it_its_priority_back_and_loses_no_real_gap(
        nats_server, nc, make_stream, tmp_path):
    from tests.raw_protocol import send_raw

    _, subject = await make_stream(allow_batched=True)
    log_path = tmp_path / "collect.log"
    proc, hogs = start_collector(nats_server.url, log_path), []
    try:
        await started(proc, log_path)
        gaps: set[str] = set()

        async def on_gap(msg):
            gaps.add(event_from_json(msg.data).batch_id)

        await nc.subscribe("batch_console.events.fast_gap.>", cb=on_gap)
        # the cores busy at normal priority, as a flooding client keeps them: nice 10 alone falls behind
        hogs = busy_cores(os.cpu_count() or 1)
        body = b'{"type":"gap","last_seq":1,"seq":2}'
        flood = [b"PUB _INBOX.flood.f%d.10.ok.2.1.$FI %d\r\n%s\r\n" % (i, len(body), body) for i in range(300_000)]
        await send_raw(nats_server.url, *flood)
        await wait_until(lambda: "took its priority back" in log_path.read_text(), 30, "the collector behind")
        if os.geteuid() == 0:
            assert os.getpriority(os.PRIO_PROCESS, proc.pid) < NICE
        idle_cores(hogs)
        batch = FastBatch(nc, flow=10, gap_mode="fail")  # a real gap, sent behind the flood
        try:
            for i in range(20):
                if i == 10:
                    batch.skip_seq()
                await batch.add(f"{subject}.x", b"x")
        except Exception:
            pass
        await wait_until(lambda: batch.batch_id in gaps, 60, "the real gap logged")
    finally:
        idle_cores(hogs)
        stop(proc)
