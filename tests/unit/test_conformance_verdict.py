"""One verdict for every face: a client with no failure "conforms" only when nothing about it is beyond what the
console can tell (a demo of deliberate faults, every fault in what cannot be told without the publish side,
was called conforming)."""

from console.domain.conformance import STATEMENTS, ClientVerdict, Tallies

UNTOLD = [sid for sid, s in STATEMENTS.items() if s.needs_publish_side]


def verdict(publish_side: bool, failed: str | None = None) -> ClientVerdict:
    results = {sid: Tallies(passed=3) for sid, s in STATEMENTS.items() if not s.needs_publish_side}
    if failed:
        results[failed] = Tallies(failed=1)
    return ClientVerdict("k", None, 3, publish_side, results, "t0", "t1")


def test_no_failure_with_statements_that_cannot_be_told_is_not_called_conforming():
    assert UNTOLD  # the catalogue has statements only the publish side settles
    assert verdict(False).verdict() == f"no failure seen; {len(UNTOLD)} cannot be told"
    assert verdict(True).verdict() == "conforms"  # seen on the publish side: nothing is beyond telling
    assert verdict(False, next(iter(STATEMENTS))).verdict() == "does not conform"


def test_the_cli_report_says_the_same_verdict_as_the_page():
    import json

    from console.conformance import as_json, markdown

    blind = verdict(False)
    said = json.loads(as_json([blind]))["clients"][0]
    assert said["verdict"] == blind.verdict() and said["conforms"] is True  # "conforms": no failure, as before
    assert f"**{blind.verdict()}**" in markdown([blind])
