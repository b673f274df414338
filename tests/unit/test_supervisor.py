"""`up`'s restart policy, and the port it picks for the alerts part's metrics."""

from console.supervisor import Part


def test_up_backs_off_from_one_second_to_a_minute_and_never_gives_a_part_up(tmp_path):
    part = Part("collector", [], tmp_path / "collector.log")
    waits = []
    for failures in range(1, 10):
        part.failures = failures
        waits.append(part.backoff())
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60, 60]


def test_the_metrics_port_beside_the_webs_is_taken_only_when_free():
    import socket

    from console.supervisor import _metrics_port

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        other = _metrics_port(taken)
        assert other != taken and other > 0
    assert _metrics_port(taken) == taken  # free again: the one beside the web's
