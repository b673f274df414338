from console.domain.batch_limits import BatchLimits, edit_risks
from console.domain.stream_settings import StreamBatchSettings

# What a real nats-server 2.15 says under /varz jetstream.limits with timeout 1 s, max_msgs 100 and
# 5 per stream set in its config (the knobs left at their defaults are absent).
VARZ = {"jetstream": {"limits": {"max_batch_inflight_per_stream": 5, "max_batch_size": 100,
                                 "max_batch_timeout": 1_000_000_000, "default_max_consumers": 1000}}}


def test_the_limits_set_in_the_config_apply_to_both_kinds_and_the_rest_are_each_kinds_default():
    limits = BatchLimits.from_varz(VARZ)
    rows = {r["limit"]: r for r in limits.rows()}
    assert rows["batch timeout (idle between two messages)"] == {
        "limit": "batch timeout (idle between two messages)", "atomic": "1.0 s", "fast": "1.0 s",
        "set by": "jetstream.limits.batch.timeout (one setting for both kinds)"}
    assert (rows["open batches per stream"]["atomic"], rows["open batches per stream"]["fast"]) == ("5", "5")
    assert (rows["open batches per server"]["atomic"], rows["open batches per server"]["fast"]) == ("1,000", "50,000")
    assert rows["open batches per server"]["set by"].startswith("default")
    assert (rows["messages per batch"]["atomic"], rows["messages per batch"]["fast"]) == ("100", "100")
    assert limits.timeout == 1.0


def test_a_hostile_varz_gives_the_defaults():
    for varz in (None, [], {"jetstream": []}, {"jetstream": {"limits": {"max_batch_timeout": "10s",
                                                                          "max_batch_size": -1,
                                                                          "max_batch_inflight_total": 10**30,
                                                                          "max_batch_inflight_per_stream": True}}}):
        limits = BatchLimits.from_varz(varz)
        assert not any(limit.configured for limit in limits.limits), varz
        assert limits.get("max_batch_size").fast is None and limits.timeout == 10.0


def test_switching_a_kind_off_warns_that_open_batches_drop_without_an_advisory():
    both = StreamBatchSettings("S", allow_atomic=True, allow_batched=True, replicas=3)
    risks = edit_risks(both, both.with_changes(allow_atomic=False, allow_batched=False))
    assert len(risks) == 2 and "allow_atomic off drops every atomic batch" in risks[0]
    assert "no batch_abandoned advisory" in risks[0] and "allow_batched off drops every fast batch" in risks[1]
    assert edit_risks(both, both) == []


def test_r1_atomic_warns_where_a_hard_kill_during_a_commit_can_leave_a_batch_part_stored():
    r1 = StreamBatchSettings("S", allow_atomic=True, replicas=1)
    assert edit_risks(r1, r1) == []  # limits retention, no max_age, no TTL: recovery finds every message
    interest = r1.with_changes(retention="interest", consumers=0)
    [risk] = edit_risks(interest, interest)
    assert "streams/S/batches/" in risk and "interest retention with no consumers" in risk
    assert edit_risks(interest.with_changes(consumers=2), interest.with_changes(consumers=2)) == []
    short = r1.with_changes(max_age=30.0, allow_msg_ttl=True)
    assert [("max_age 30 s" in r, "per-message TTL" in r) for r in edit_risks(short, short)] == [(True, False), (False, True)]
    assert edit_risks(r1.with_changes(max_age=3600.0), r1.with_changes(max_age=3600.0)) == []
    assert edit_risks(r1.with_changes(replicas=3, retention="workqueue", consumers=0),
                      r1.with_changes(replicas=3, retention="workqueue", consumers=0)) == []  # R3 replicates the batch
