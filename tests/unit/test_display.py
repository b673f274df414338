from datetime import datetime, timedelta, timezone

import pandas as pd

from console.domain.display import Clock, count, duration, size
from console.ui.formatting import put, shown

T = datetime(2026, 11, 21, 22, 14, 32, 655_577, tzinfo=timezone.utc)


def test_times_are_dates_in_utc_or_the_readers_zone_never_an_epoch():
    assert Clock().when(T) == "2026-11-21 22:14:32 UTC"
    assert Clock().when(T, fraction=True) == "2026-11-21 22:14:32.655 UTC"
    assert Clock().when(T.replace(tzinfo=None)) == "2026-11-21 22:14:32 UTC"  # naive means UTC
    paris = Clock.named("Europe/Paris")
    assert paris.when(T) == "2026-11-21 23:14:32 CET" and paris.label == "Europe/Paris"
    assert Clock().when(None) == ""


def test_a_zone_name_from_a_cookie_is_hostile_and_anything_odd_is_utc():
    for name in ("", "UTC", "../../etc/passwd", "Nope/Zone", "Europe/Paris\x00", "A" * 300, "/etc/localtime"):
        assert Clock.named(name).is_utc, name


def test_durations_read_at_a_glance():
    assert [duration(s) for s in (0.85, 3.24, 45, 245, 3900, 90_000)] == [
        "850 ms", "3.2 s", "45 s", "4 min", "1 h 5 min", "1 d 1 h"]
    assert duration(timedelta(minutes=4)) == "4 min" and duration(None) == "" and duration(float("nan")) == ""


def test_counts_and_sizes_have_separators_and_units():
    assert (count(1234567), count(12.5), count(None)) == ("1,234,567", "12.5", "")
    assert (size(512), size(1536), size(20 * 2**20)) == ("512 B", "1.5 KiB", "20.0 MiB")


def test_a_table_for_the_eye_writes_times_and_durations_and_keeps_the_rest():
    frame = pd.DataFrame({"time": pd.to_datetime([T]), "mean_seconds": [245.0], "batches": [12345]})
    out = shown(frame, Clock(), durations=("mean_seconds",))
    assert out.to_dict("records") == [{"time": "2026-11-21 22:14:32 UTC", "mean_seconds": "4 min", "batches": 12345}]
    assert frame["time"].dtype.kind == "M"  # the frame given (the CSV's) is left as it was


def test_a_bars_tooltip_names_the_first_batch_ids_of_its_slot():
    from console.ui.formatting import ids_by_slot
    start = T.replace(minute=0, second=0, microsecond=0)
    losses = [(start + timedelta(minutes=1, seconds=i), f"b{i}") for i in range(7)] + [(start + timedelta(minutes=3), None)]
    assert ids_by_slot(losses, start, timedelta(minutes=1), 4) == ["", "b0, b1, b2, b3, b4, …", "", "?"]


def test_history_plots_show_the_hours_with_data_not_the_whole_range():
    from console.ui.history import data_extent
    hours = pd.Series(pd.to_datetime(["2026-11-20 09:00", "2026-11-20 11:00"], utc=True))
    first, last = data_extent(hours, pd.Series([], dtype="datetime64[ns, UTC]"))
    assert (first.hour, last.hour) == (8, 13) and data_extent(pd.Series([], dtype=object)) is None


def test_a_table_on_a_timer_is_sent_a_frame_only_when_it_changed():
    import panel as pn
    table = pn.widgets.Tabulator(pd.DataFrame())
    sent = []
    table.param.watch(lambda e: sent.append(e.new), "value")
    put(table, pd.DataFrame({"rule": ["lost"], "state": ["ok"]}))
    put(table, pd.DataFrame({"rule": ["lost"], "state": ["ok"]}))
    put(table, pd.DataFrame({"rule": ["lost"], "state": ["FIRING"]}))
    put(table, pd.DataFrame({"name": ["lost"], "state": ["FIRING"]}))
    assert [list(f.iloc[0]) for f in sent] == [["lost", "ok"], ["lost", "FIRING"], ["lost", "FIRING"]]
    assert list(sent[-1].columns) == ["name", "state"]


def test_bars_stack_the_reasons_of_a_slot_in_one_glyphs_rows():
    from console.ui.formatting import REASON_COLORS, stacked
    data = stacked(["10:00", "10:01", "10:02"], {"gap": [0, 2, 0], "timeout": [1, 3, 0]}, ["a", "b, c", ""])
    rows = list(zip(data["t"], data["reason"], data["bottom"], data["top"], data["ids"]))
    assert rows == [("10:00", "timeout", 0, 1, "a"), ("10:01", "timeout", 0, 3, "b, c"), ("10:01", "gap", 3, 5, "b, c")]
    assert data["color"] == [REASON_COLORS["timeout"]] * 2 + [REASON_COLORS["gap"]]


def test_a_provisional_ledger_row_says_its_context_is_not_counted_yet_never_zero():
    from console.ui.history import NOT_COUNTED, ledger_frame, provisional_text

    frame = pd.DataFrame({"batch_id": ["a", "b"], "leader_elections": [2, 0], "stream_updates": [0, 0],
                          "other_abandonments": [1, 0], "gaps_nearby": [0, 0], "provisional": [False, True]})
    shown_frame = ledger_frame(frame)
    assert "provisional" not in shown_frame
    assert shown_frame.iloc[0].tolist() == ["a", "2", "0", "1", "0"]
    assert shown_frame.iloc[1].tolist() == ["b", NOT_COUNTED, NOT_COUNTED, NOT_COUNTED, NOT_COUNTED]
    assert "1 of the lost batches came in since the job's last run" in provisional_text(frame)
    settled = frame.assign(provisional=False)
    assert ledger_frame(settled)["leader_elections"].tolist() == ["2", "0"] and provisional_text(settled) == ""


def test_the_ledgers_domain_column_is_shown_only_where_a_loss_has_a_domain():
    from console.ui.history import ledger_frame

    frame = pd.DataFrame({"batch_id": ["a", "b"], "domain": [None, None]})
    assert "domain" not in ledger_frame(frame)
    assert ledger_frame(frame.assign(domain=[None, "leaf1"]))["domain"].tolist() == [None, "leaf1"]


def test_a_ledger_row_with_no_context_count_says_not_counted_never_nan():
    """History showed "NaN" in the context columns of rows the job had not covered (the stream page said "…")."""
    from console.ui.history import NOT_COUNTED, ledger_frame

    frame = pd.DataFrame({"batch_id": ["a", "b", "c"], "leader_elections": [1.0, float("nan"), None],
                          "stream_updates": [0.0, float("nan"), None], "other_abandonments": [3.0, None, None],
                          "gaps_nearby": [0.0, float("nan"), None]})
    shown_frame = ledger_frame(frame)
    assert shown_frame.iloc[0].tolist() == ["a", "1", "0", "3", "0"]
    assert shown_frame.iloc[1].tolist()[1:] == [NOT_COUNTED] * 4 and shown_frame.iloc[2].tolist()[1:] == [NOT_COUNTED] * 4
    assert "nan" not in shown_frame.to_csv().lower()


def test_a_count_agrees_with_its_noun():
    from console.domain.display import counted

    assert [counted(n, "consumer") for n in (0, 1, 2, 1000)] == ["0 consumers", "1 consumer", "2 consumers",
                                                                "1,000 consumers"]
    assert counted(1, "batch", "batches") == "1 batch" and counted(3, "batch", "batches") == "3 batches"


def test_history_in_the_readers_zone_reads_its_days_and_draws_its_hours_there():
    """Local-time mode: the dates picked are the reader's days, the plots' hours the reader's clock (a
    table in local time beside a plot and a date filter in UTC read as two different days)."""
    from datetime import date

    from console.ui.history import HistoryPage, gap_lines, wall

    kolkata = Clock.named("Asia/Kolkata")  # half an hour off UTC: a day starts inside a UTC hour
    page = HistoryPage(history=None, dates=(date(2026, 11, 21), date(2026, 11, 21)), clock=kolkata)
    assert page._bounds() == (datetime(2026, 11, 20, 18, 30, tzinfo=timezone.utc),
                              datetime(2026, 11, 21, 18, 30, tzinfo=timezone.utc))
    assert page._range.name == "dates (Asia/Kolkata)"
    assert page._hours.start == datetime(2026, 11, 21, 0, 0)  # the reader's midnight on the axis
    assert HistoryPage(history=None, dates=(date(2026, 11, 21), date(2026, 11, 21)))._range.name == "dates (UTC)"
    frame = pd.DataFrame({"hour": [pd.Timestamp("2026-11-20 18:00", tz="UTC")], "gaps": [2], "lost": [5]})
    drawn = gap_lines(frame, *page._bounds(), clock=kolkata)
    assert drawn["t"][0] == pd.Timestamp("2026-11-20 23:30") and drawn["gaps"][0] == 2  # its UTC hour, counted
    assert wall([T], Clock()) == [T]
