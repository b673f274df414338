"""console.broker.connection.cancelled: a task that misses a cancel still ends, and the caller waits for it."""

import asyncio

import pytest

from console.broker.connection import cancelled


async def _misses_the_first_cancel(ended: list[str]) -> None:
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:  # as Python 3.11's wait_for does when its answer lands with the cancel
        pass
    try:
        await asyncio.sleep(60)
    finally:
        ended.append("ended")


async def test_a_task_that_misses_a_cancel_is_cancelled_again_until_it_ends():
    ended: list[str] = []
    task = asyncio.create_task(_misses_the_first_cancel(ended))
    await asyncio.sleep(0)
    await asyncio.wait_for(cancelled(task, every=0.05), 5)
    assert task.cancelled() and ended == ["ended"]


async def test_a_caller_cancelled_while_it_waits_still_waits_for_the_task_then_is_cancelled():
    ended: list[str] = []
    task = asyncio.create_task(_misses_the_first_cancel(ended))
    await asyncio.sleep(0)
    caller = asyncio.create_task(cancelled(task, every=0.2))
    await asyncio.sleep(0.05)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert task.done() and ended == ["ended"]


async def test_a_finished_task_is_left_as_it_is():
    task = asyncio.create_task(asyncio.sleep(0, result=7))
    await task
    await cancelled(task)
    assert task.result() == 7
