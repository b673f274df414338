"""A server's fsync policy read from its /varz, totally: what nats-server 2.15.1 reports for its default,
`always` and an interval, and odd answers as "not known", never "safe"."""

import pytest

from console.domain.checks import Facts, StreamFacts, evaluate
from console.domain.durability import ServerSync, server_sync
from console.domain.stream_settings import StreamBatchSettings


def varz(**config):
    return {"server_name": "n1", "jetstream": {"config": {"max_memory": 1, "store_dir": "/x", **config}}}


def test_the_policies_nats_server_reports():
    assert server_sync(varz(sync_interval=120_000_000_000)) == ServerSync("n1", False, 120.0)  # the default
    assert server_sync(varz(sync_interval=120_000_000_000, sync_always=True)).always is True
    assert server_sync(varz(sync_interval=5_000_000_000)).said() == "n1 flushes to disk every 5 s"
    assert server_sync(varz()).said() == "n1 flushes to disk every 2 min"  # not reported: the default


@pytest.mark.parametrize("answer", [None, [], "x", {"server_name": "n1"}, {"jetstream": {"config": {}}},
                                    {"server_name": "\x1b[2J", "jetstream": {"config": {}}},
                                    {"server_name": "n" * 300, "jetstream": {"config": {}}},
                                    {"server_name": "n1", "jetstream": {"config": "always"}}])
def test_an_answer_that_is_not_a_servers_is_none(answer):
    assert server_sync(answer) is None


@pytest.mark.parametrize("value", ["always", 1.5, -1, 10**30, True])
def test_an_interval_in_another_form_is_not_known_and_still_not_safe(value):
    sync = server_sync(varz(sync_interval=value))
    assert sync is not None and sync.always is False and sync.interval_s is None
    assert "an interval it does not report" in sync.said()


def test_batch_025_grades_an_r1_stream_a_warning_a_replicated_one_info_and_async_persist_a_warning():
    streams = (StreamFacts(StreamBatchSettings("ONE", allow_atomic=True, replicas=1)),
               StreamFacts(StreamBatchSettings("THREE", allow_batched=True, replicas=3)),
               StreamFacts(StreamBatchSettings("ASYNC", allow_batched=True, persist_mode="async")),
               StreamFacts(StreamBatchSettings("PLAIN")))
    lazy = evaluate(Facts(streams=streams, syncs=(ServerSync("n1", False, 120.0), ServerSync("n2", True, None))),
                    codes={"BATCH_025"})
    found = {f.stream: (f.severity, f.evidence) for f in lazy.findings}
    assert set(found) == {"ONE", "THREE", "ASYNC"}
    assert found["ONE"][0] == "warning" and found["THREE"][0] == "info" and found["ASYNC"][0] == "warning"
    assert "n1 flushes to disk every 2 min" in found["ONE"][1] and "n2" not in found["ONE"][1]
    assert "persist_mode is async" in found["ASYNC"][1]
    safe = evaluate(Facts(streams=streams[:2], syncs=(ServerSync("n1", True, None),)), codes={"BATCH_025"})
    assert safe.findings == () and safe.checked == ("BATCH_025",)
    assert "not known" in dict(evaluate(Facts(streams=streams), codes={"BATCH_025"}).unchecked)["BATCH_025"]
