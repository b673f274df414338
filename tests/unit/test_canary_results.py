"""A canary result read back from the event log, which anyone of the account may write: its domain (a
leaf's) is a name the wire takes, or the record is refused."""

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from console.domain.canary import CanaryResult, canary_result
from console.domain.events import MalformedEvent

NOW = datetime(2026, 12, 2, tzinfo=timezone.utc)


def test_a_results_domain_round_trips_and_an_older_result_without_one_reads():
    result = CanaryResult("default", "edge-a", "fast", 1.5, 3.0, 0, 10, domain="leaf1")
    event = result.event("i1", NOW, "BATCH_CONSOLE_CANARY_EDGE-A")
    assert event.domain == "leaf1" and canary_result(event) == result
    older = CanaryResult("default", "n1", "atomic", 1.0, 2.0, 0, 10).event("i1", NOW, "S")
    older = replace(older, detail=older.detail.replace(',"domain":null', ""))
    assert canary_result(older).domain is None


@pytest.mark.parametrize("domain", ['"a.b"', '"x' + "y" * 70 + '"', '"\\u001b[2J"', "5", "[]", '{"a":1}', '""'])
def test_a_forged_domain_is_refused(domain):
    event = CanaryResult("default", "n1", "atomic", 1.0, 2.0, 0, 10, domain="leaf1").event("i1", NOW, "S")
    forged = replace(event, detail=event.detail.replace('"leaf1"', domain))
    with pytest.raises(MalformedEvent):
        canary_result(forged)
