"""console.queries.sight: one rule for what a reader sees, over History's SQLite and the audit trail."""

from datetime import datetime, timedelta, timezone

from sqlmodel import Session

from console.domain.audit import Actor, AuditRecord, Checked
from console.domain.roles import Grants, Role
from console.queries.sight import Sight
from console.storage.history import Reader
from console.storage.sqlite import open_db
from console.storage.tables import AbandonmentHourly, FastBatchSummary, GapHourly

HOUR = datetime(2026, 11, 21, 3, tzinfo=timezone.utc)
TEAM = Sight(Grants((Role("team", frozenset({"search.run"}), streams=("TEAM*",)),)))


def test_history_through_a_teams_sight_sums_its_streams_alone(tmp_path):
    engine = open_db(tmp_path / "console.db")
    with Session(engine) as s:
        for stream, batches, gaps in (("TEAM_A", 2, 1), ("TEAM_B", 3, 0), ("OTHER", 40, 7)):
            s.add(AbandonmentHourly(hour=HOUR, stream=stream, kind="atomic", reason="timeout", batches=batches))
            s.add(GapHourly(hour=HOUR, stream=stream, gap_mode="ok", gaps=gaps, lost=gaps * 2))
            s.add(FastBatchSummary(batch_id=f"f-{stream}", stream=stream, started=HOUR, outcome="committed", gaps=gaps,
                                   lost=gaps * 2, errors=0))
        s.commit()
    span = (HOUR, HOUR + timedelta(hours=1))
    team, everyone = Reader(engine).seen_by(TEAM.sees), Reader(engine)
    assert team.abandonments_by_hour(*span)["batches"].tolist() == [5]
    assert everyone.abandonments_by_hour(*span)["batches"].tolist() == [45]
    assert team.gaps_by_hour(*span)[["gaps", "lost"]].values.tolist() == [[1, 2]]
    assert team.fast_outcomes(*span)[["outcome", "batches", "lost"]].values.tolist() == [["committed", 2, 2]]
    assert set(team.abandonments_by_stream(*span)["stream"]) == {"TEAM_A", "TEAM_B"}
    assert list(team.abandonments_by_hour(HOUR + timedelta(days=1), HOUR + timedelta(days=2)).columns) == \
        ["hour", "reason", "batches"]  # nothing seen: the same columns, no rows


def test_the_audit_trail_through_a_teams_sight_keeps_its_records_and_those_of_no_stream():
    def record(action: str, target: str) -> AuditRecord:
        return AuditRecord(HOUR, Actor("ada"), action, target, "accepted")

    checked = Checked([(1, record("stream.edit", "TEAM_A")), (2, record("search.run", 'OTHER {"where": "card"}')),
                       (3, record("alert_rule.mute", "abandoned")), (4, record("consumer.fetch", "OTHER/ops seq 4"))],
                      [], systems=("eu", "us", "eu", "us"))
    seen = TEAM.audit(checked)
    assert [seq for seq, _ in seen.records] == [1, 3] and seen.systems == ("eu", "eu")
    assert TEAM.keep([{"stream": "OTHER"}, {"stream": None}, {"stream": "TEAM_A"}], lambda f: f["stream"]) == \
        [{"stream": None}, {"stream": "TEAM_A"}]


def test_the_alerts_through_a_teams_sight_fire_and_send_for_its_streams_alone(tmp_path):
    from console.alerting.view import AlertsView
    from console.queries.alerts import SeenAlerts
    from console.storage.alert_state import AlertStore

    db = tmp_path / "console.db"
    store = AlertStore(db)
    store.save_firing({("lost", "TEAM_A"): (HOUR, HOUR), ("lost", "OTHER"): (HOUR, HOUR), ("silent", ""): (HOUR, HOUR)})
    for stream in ("TEAM_A", "OTHER"):
        store.add_notice(HOUR, f'{{"rule": "lost", "stream": "{stream}", "status": "firing"}}')
        store.add_delivery(HOUR, rule="lost", stream=stream, status="firing", target="ops", ok=True, answer="200")
    view = SeenAlerts(AlertsView(tmp_path, None, db), TEAM.sees)
    assert sorted((rule, stream) for rule, stream, _ in view.firing()) == [("lost", "TEAM_A"), ("silent", "")]
    assert [n["stream"] for n in view.notices()] == ["TEAM_A"] and [d["stream"] for d in view.deliveries()] == ["TEAM_A"]
    assert len(AlertsView(tmp_path, None, db).firing()) == 3  # the view itself: every stream's


def test_a_clients_verdict_through_a_teams_sight_keeps_its_examples_of_streams_it_sees():
    from console.domain.conformance import ClientVerdict, Example, Tallies, Verdicts, client_key
    from console.domain.events import BatchEvent, EventKind
    from console.domain.publisher import Publisher

    app = Publisher(name="orders", lang="python3", version="2.16.0", account="APP")
    examples = [Example("b-team", "TEAM_A", "2026-11-25T12:00:00Z", "message 99 after the end"),
                Example("b-other", "OTHER", "2026-11-25T12:00:01Z", "message 99 after the end"),
                Example("b-unknown", None, "2026-11-25T12:00:02Z", "an ack past the end")]
    verdict = ClientVerdict(client_key(app), app, 3, False, {"F09": Tallies(0, 3, examples)},
                            "2026-11-25T12:00:00Z", "2026-11-25T12:01:00Z")
    read = Verdicts()
    read.apply(BatchEvent("v1", EventKind.CONFORMANCE, HOUR, None, "conformance", detail=verdict.to_json()))
    [seen] = TEAM.verdicts(read).report()
    assert [e.batch_id for e in seen.results["F09"].examples] == ["b-team", "b-unknown"]
    assert seen.failing == ["F09"] and seen.batches == 3  # the client's verdict is the client's
    [whole] = read.report()  # the shared read is not changed by a reader's view of it
    assert len(whole.results["F09"].examples) == 3
    everyone = Sight(Grants((Role("admin", frozenset({"*"}), streams=("*",)),)))
    assert everyone.verdicts(read) is read
