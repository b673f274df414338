import pytest

from console.domain.stream_settings import StreamBatchSettings, check_settings, diff_settings, needed_api_level


def codes(violations):
    return sorted((v.field, v.err_code) for v in violations)


def test_required_level_is_read_from_the_servers_metadata(vectors):
    streams = [r for r in vectors.records("streams") if "refused" not in r]
    levels = {"0", "2", "4"} if vectors.fast_ingest else {"0", "2"}
    assert {r["metadata"]["_nats.req.level"] for r in streams} == levels
    for rec in streams:
        settings = StreamBatchSettings.from_config({"name": rec["scenario"], **rec["flags"], "metadata": rec["metadata"]})
        assert settings.required_api_level == needed_api_level(settings)


def test_async_persist_only_on_r1_and_never_with_atomic():
    base = StreamBatchSettings("S", persist_mode="async")
    assert check_settings(base) == []
    assert codes(check_settings(base.with_changes(replicas=3))) == [("persist_mode", None)]
    assert codes(check_settings(base.with_changes(allow_atomic=True))) == [("persist_mode", 10052)]
    assert check_settings(base.with_changes(allow_batched=True)) == []


def test_mirrors_cannot_enable_either_flag_but_sources_can():
    mirror = StreamBatchSettings("M", is_mirror=True)
    assert codes(check_settings(mirror.with_changes(allow_atomic=True, allow_batched=True))) == [
        ("allow_atomic", 10198),
        ("allow_batched", 10209),
    ]
    assert check_settings(StreamBatchSettings("S", sources=2, allow_atomic=True, allow_batched=True)) == []


def test_server_api_level_must_cover_the_flags():
    fast = StreamBatchSettings("S", allow_batched=True)
    assert check_settings(fast, server_api_level=4) == []
    [violation] = check_settings(fast, server_api_level=3)
    assert violation.field == "allow_batched" and "level 4" in violation.message
    assert check_settings(StreamBatchSettings("S", allow_atomic=True), server_api_level=2) == []


def test_diff_names_only_changed_batch_fields():
    before = StreamBatchSettings("S")
    after = before.with_changes(allow_batched=True, replicas=3)
    assert diff_settings(before, after) == {"allow_batched": (False, True)}


def test_an_edit_is_decided_once_from_the_current_settings_and_a_proposal():
    """EditStream.validate: what the Streams page and the API both run (a no-op is no edit; a setting
    left as None stays; anything but a batch setting is refused)."""
    import pytest

    from console.commands import EditStream

    current = StreamBatchSettings("ORDERS", allow_atomic=False, allow_batched=True, persist_mode="default")
    assert EditStream.validate(current, allow_atomic=False, allow_batched=True, persist_mode="default") is None
    assert EditStream.validate(current, allow_atomic=None) is None
    edit = EditStream.validate(current, allow_atomic=True, allow_batched=None)
    assert edit is not None and (edit.stream, edit.changes) == ("ORDERS", {"allow_atomic": (False, True)})
    for hostile in ({"max_age": 1}, {"name": "OTHER"}, {"replicas": 3}):
        with pytest.raises(ValueError, match="not a batch setting"):
            EditStream.validate(current, **hostile)


@pytest.mark.parametrize("external, domain", [
    ({"api": "$JS.leaf1.API"}, "leaf1"),
    ({"api": "$JS.API"}, ""),  # an API prefix that names no domain: another JetStream all the same
    ({"api": "$JS.a.b.API"}, ""),
    ({"api": "$JS." + "x" * 65 + ".API"}, ""),
    ({"api": "$JS.leaf\x00.API"}, ""),
    ({"api": 7}, ""),
    ({"api": None}, ""),
    ("$JS.leaf1.API", None),  # not an object: no external at all
])
def test_a_copys_origin_in_another_domain_is_not_taken_for_a_stream_of_its_own(external, domain):
    settings = StreamBatchSettings.from_config({"name": "COPY", "sources": [{"name": "EDGE", "external": external},
                                                                           {"name": "LOCAL"}]})
    if domain is None:
        assert settings.copies_of == ("EDGE", "LOCAL") and settings.copies_from == ()
    else:
        assert settings.copies_of == ("LOCAL",) and settings.copies_from == ((domain, "EDGE"),)
