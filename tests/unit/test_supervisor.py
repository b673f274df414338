"""`up`'s restart policy."""

from console.supervisor import Part


def test_up_backs_off_from_one_second_to_a_minute_and_never_gives_a_part_up(tmp_path):
    part = Part("collector", [], tmp_path / "collector.log")
    waits = []
    for failures in range(1, 10):
        part.failures = failures
        waits.append(part.backoff())
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60, 60]
