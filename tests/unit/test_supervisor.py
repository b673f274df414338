"""`up`'s restart policy, and the port it picks for the alerts part's metrics."""

import socket
import urllib.request

import pytest

from console.supervisor import Part


def test_up_backs_off_from_one_second_to_a_minute_and_never_gives_a_part_up(tmp_path):
    part = Part("collector", [], tmp_path / "collector.log")
    part.restarts.started()
    waits = [part.restarts.wait() for _ in range(9)]  # nine failures in a row, each within a minute of its start
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert part.failures == 9


def test_the_metrics_port_beside_the_webs_is_taken_only_when_free_and_held_from_then_on():
    from console.supervisor import _metrics_listener

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        with _metrics_listener(taken) as other:
            assert other.getsockname()[1] not in (taken, 0)
    with _metrics_listener(taken) as mine:  # free again: the one beside the web's, and nobody else's now
        assert mine.getsockname()[1] == taken
        with socket.socket() as late, pytest.raises(OSError):
            late.bind(("127.0.0.1", taken))


def _get(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.status


def test_the_alerts_part_serves_on_the_socket_up_holds_and_binds_its_own_for_anything_else(tmp_path):
    from console.alerting.metrics import Metrics, serve_metrics

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = serve_metrics(Metrics(), port, inherited=str(listener.fileno()))
    try:
        assert server.socket.fileno() == listener.fileno() and _get(port) == 200
    finally:
        server.shutdown()
        server.server_close()  # the part's copy: in a process of its own, up's stays open
        listener.detach()
    other = socket.create_server(("127.0.0.1", 0))  # a socket, listening, on another port
    a_file = open(tmp_path / "f", "w")
    unbound = socket.socket()
    for given in ("abc", "-1", "99999999", "1\n", "٣", "", str(a_file.fileno()), str(other.fileno()),
                  str(unbound.fileno()), "0" * 1000):
        server = serve_metrics(Metrics(), 0, inherited=given)
        try:
            assert server.socket.fileno() not in (other.fileno(), unbound.fileno())
            assert server.server_port not in (0, port)
            assert _get(server.server_port) == 200
        finally:
            server.shutdown()
            server.server_close()
    assert other.fileno() >= 0 and unbound.fileno() >= 0 and not a_file.closed  # none of them closed
    other.close(), unbound.close(), a_file.close()


def test_a_part_whose_work_ends_is_finished_not_restarted_and_one_that_fails_is(tmp_path):
    """`up --demo --demo-rounds N`: the demo ends after its rounds (code 0) and stays ended; any other part that
    exits, or a finishing one that fails, is restarted as ever."""
    import io

    from console.config import DataSettings, Settings
    from console.supervisor import Supervisor

    up = Supervisor(Settings(data=DataSettings(data_dir=tmp_path)), out=io.StringIO())
    done = up._part("demo", ["--help"])  # exits 0 at once
    done.may_finish = True
    failed = up._part("canary", ["no-such-command"])  # exits 2
    failed.may_finish = True
    for part in (done, failed):
        part.started.wait(timeout=30)
    up.check()
    assert done.state == "finished" and done.restart_at is None and done.failures == 0
    assert failed.restart_at is not None and failed.failures == 1
    up.check()  # a second pass says nothing more of it
    assert done.state == "finished" and "demo: finished" in up.out.getvalue()
    assert up.out.getvalue().count("demo: finished") == 1
