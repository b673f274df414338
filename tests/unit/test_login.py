"""The login guard: a failing address is slowed, never the others."""


def test_a_failing_address_waits_longer_each_time_and_a_success_clears_it():
    from console.login import FREE_FAILURES, Failures

    failures = Failures()
    now = 1000.0
    for _ in range(FREE_FAILURES):
        assert failures.wait("a", now) == 0
        failures.add("a", now)
    waits = []
    for _ in range(4):
        waits.append(failures.wait("a", now))
        failures.add("a", now)
    assert waits == [2.0, 4.0, 8.0, 16.0]
    assert failures.wait("b", now) == 0  # another address is not slowed
    assert failures.wait("a", now + 31.9) > 0 and failures.wait("a", now + 32.0) == 0
    failures.succeeded("a")
    assert failures.wait("a", now) == 0
