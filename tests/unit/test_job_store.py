import time

from console.api.job_store import JobStore, OwnedJob


def test_a_callers_jobs_are_its_own_and_a_full_store_makes_room_among_the_caller_with_the_most():
    store: JobStore[OwnedJob] = JobStore(kept_for=60, most=4, most_each=3)
    mine = [store.add(OwnedJob("me", ended_at=time.monotonic() if i == 1 else None)) for i in range(3)]
    assert store.of("you", mine[0]) is None and store.of("me", mine[0]) is not None
    running = store.of("me", mine[0])
    store.add(OwnedJob("me"))  # its fourth: its oldest ended one goes, its running ones stay
    assert store.of("me", mine[1]) is None and store.of("me", mine[0]) is running
    store.add(OwnedJob("you"))
    assert store.of("me", mine[0]) is running and not running.cancel
    yours = store.add(OwnedJob("you"))  # the store full: the caller with the most makes room, its oldest running
    assert store.of("me", mine[0]) is None and running.cancel and store.of("you", yours) is not None
    assert sum(1 for _ in store) == 4


def test_ended_jobs_are_kept_for_a_while():
    store: JobStore[OwnedJob] = JobStore(kept_for=0.05, most=10)
    ended = store.add(OwnedJob("me", ended_at=time.monotonic() - 1))
    running = store.add(OwnedJob("me"))
    assert store.of("me", ended) is None and store.of("me", running) is not None
