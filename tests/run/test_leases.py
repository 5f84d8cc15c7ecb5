"""Issue 19, item 1: one backfill at a time per target range (leases in the ledger), ``--after``, ``--concurrent``
and ``backfill abandon``."""

from __future__ import annotations

import json
import threading
from datetime import date, datetime, timedelta, timezone

import pytest

from backfill_lib.core.leases import committed_before, holding, lease_of, make_lease, refusal
from backfill_lib.core.partitions import Grain, half_open
from backfill_lib.ledger.writer import PLANNED_KEY, commit_tag, tagged_runs

NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
NY = "America/New_York"


def lease(run_id, start, end, *, status="planned", table="db.events", whole=False, seq=1, age_hours=0.0, tz=NY,
          resumable=None):
    return make_lease(run_id, table, "ana@example.com", status, whole=whole, start=start, end=end, time_zone=tz,
                      planned_seq=seq, last_event_at=NOW - timedelta(hours=age_hours), resumable=resumable)


# --- pure ---------------------------------------------------------------------------------------------------

def test_leases_conflict_on_overlapping_ranges_of_the_same_table_while_their_run_is_not_final():
    mine = lease("mine", date(2024, 3, 31), date(2024, 4, 2), seq=9)
    others = [
        lease("march", date(2024, 3, 1), date(2024, 4, 1), status="failed", seq=1),  # shares 2024-03-31
        lease("gate", date(2024, 3, 1), date(2024, 4, 1), status="failed", seq=1, resumable=False),
        lease("april", date(2024, 4, 2), date(2024, 4, 3), seq=2),  # starts where mine ends: no overlap
        lease("other_table", date(2024, 3, 1), date(2024, 5, 1), table="db.other", seq=3),
        lease("done", date(2024, 3, 1), date(2024, 5, 1), status="published", seq=4),
        lease("abandoned", date(2024, 3, 1), date(2024, 5, 1), status="abandoned", seq=5),
        lease("stale", date(2024, 3, 1), date(2024, 5, 1), status="staging", age_hours=25, seq=6),
        lease("rebuild", None, None, whole=True, status="validated", table="DB.Events", seq=7),
    ]
    held = holding(others, mine, NOW, lease_hours=24)
    assert [h.run_id for h in held] == ["march", "rebuild"]
    # a day starts at midnight in its own request's zone: UTC 2024-04-01 is still 2024-03-31 in New York
    utc = lease("utc", date(2024, 4, 1), date(2024, 4, 2), tz="UTC", seq=10)
    assert [h.run_id for h in holding(others[:1], utc, NOW, 24)] == ["march"]
    assert refusal(mine, held, 24) == (
        "table db.events: run march (owner ana@example.com, status failed) holds [2024-03-01, 2024-04-01) "
        "America/New_York, which overlaps this run's [2024-03-31, 2024-04-02) America/New_York (and 1 more: "
        "rebuild); finish it (`backfill resume march`), wait for it (--after march), release it (`backfill abandon "
        "march --reason TEXT`) or run beside it (--concurrent); a lease also expires 24 hours after its run's last "
        "event")


def test_of_two_racing_plans_the_one_committed_first_is_earlier_whatever_their_clocks():
    # b stamped its plan first (seq 5) but its commit (version 12) came after a's (seq 7, version 11): b withdraws
    # and a goes on. Ordered by seq instead, each would find the other the later one and both would go on.
    a = lease("a", date(2024, 3, 1), date(2024, 3, 5), seq=7)
    b = lease("b", date(2024, 3, 4), date(2024, 3, 9), seq=5)
    commits = {"a": 11, "b": 12, "c": 10}
    assert committed_before([b], a, commits) == []
    assert committed_before([a], b, commits) == [a]
    # a run whose commit names no runs (an older release, a statement by hand): by (planned_seq, run_id)
    old = lease("old", date(2024, 3, 1), date(2024, 3, 2), seq=6)
    assert committed_before([old], a, commits) == [old]
    assert committed_before([old], b, commits) == []
    assert committed_before([b], a, {}) == [b]  # no plan committed since the turn (a resume): the stamps decide
    assert committed_before([b], a, {"a": 11, "b": 11}) == [b]  # one commit holds both plans: the stamps decide
    assert committed_before([a], b, {"a": 11, "b": 11}) == []


def test_a_ledger_commit_names_its_runs_and_plans_and_other_metadata_names_none():
    assert commit_tag({"r2", "r1", None}) == '{"ledger_runs": ["r1", "r2"]}'
    tag = commit_tag({"r2", "r1"}, {"r2"})
    assert (tagged_runs(tag), tagged_runs(tag, PLANNED_KEY)) == (["r1", "r2"], ["r2"])
    assert [tagged_runs(m) for m in (None, "", "not json", '{"run_id": "r1"}', '["r1"]', '{"ledger_runs": "r1"}',
                                     '{"ledger_runs": ["r1", 3]}')] == [[], [], [], [], [], [], ["r1"]]

def test_the_same_date_conflicts_whatever_the_zones_of_the_two_requests():
    # a DATE partition 2024-03-02 is one partition in every zone; in instants these days are 24 hours apart
    # (Kiritimati is UTC+14, Honolulu UTC-10), so only the wall-clock comparison sees the overlap
    first = lease("kiritimati", date(2024, 3, 1), date(2024, 3, 3), tz="Pacific/Kiritimati", seq=1)
    second = lease("honolulu", date(2024, 3, 2), date(2024, 3, 3), tz="Pacific/Honolulu", seq=2)
    assert second.start >= first.end  # no shared instant
    assert [h.run_id for h in holding([first], second, NOW, 24)] == ["kiritimati"]
    later = lease("honolulu_4th", date(2024, 3, 4), date(2024, 3, 5), tz="Pacific/Honolulu", seq=3)
    assert holding([first], later, NOW, 24) == []


def test_hours_of_a_timestamp_column_conflict_only_as_instants_and_hours_written_as_text_also_by_wall_clock():
    # Kiritimati's and Honolulu's 2024-03-01 are adjacent instant ranges ([02-29T10Z, 03-01T10Z), [03-01T10Z, ...))
    def run(run_id, tz, seq, **target):
        bounds = half_open(date(2024, 3, 1), date(2024, 3, 1), Grain.HOUR, tz)
        plan = {"request": {"target": {"table": "db.hits", "partition_column": "h", "grain": "hour", **target},
                            "strategy": "recompute", "range": {"start": "2024-03-01", "end": "2024-03-01"},
                            "time_zone": tz},
                "range_start": str(bounds[0]), "range_end_exclusive": str(bounds[1]),  # UTC, as plans store them
                "whole_table": False}
        return lease_of({"run_id": run_id, "plan_json": json.dumps(plan), "status": "staging", "event_at": NOW,
                         "planned_seq": seq, "owner": "ana@example.com"})

    first, second = run("kiritimati", "Pacific/Kiritimati", 1), run("honolulu", "Pacific/Honolulu", 2)
    assert first.end == second.start  # no shared instant
    assert holding([first], second, NOW, 24) == []
    # a string hour 2024030100 is the same partition whatever the zone: the wall clocks overlap
    first, second = (run("kiritimati", "Pacific/Kiritimati", 1, partition_format="yyyyMMddHH"),
                     run("honolulu", "Pacific/Honolulu", 2, partition_format="yyyyMMddHH"))
    assert [h.run_id for h in holding([first], second, NOW, 24)] == ["kiritimati"]


def test_a_plan_that_writes_the_whole_table_holds_it_whatever_its_range_and_an_unsaid_plan_holds_it_too():
    def run(run_id, seq, start, end, **flag):
        plan = {"request": {"target": {"table": "db.events", "partition_column": "d"}, "strategy": "any",
                            "range": {"start": start, "end": end}, "time_zone": "UTC"},
                "range_start": start, "range_end_exclusive": end, **flag}
        return lease_of({"run_id": run_id, "plan_json": json.dumps(plan), "status": "staging", "event_at": NOW,
                         "planned_seq": seq, "owner": "ana@example.com"})

    ranged = run("march", 2, "2024-03-01", "2024-04-01", whole_table=False)
    assert (ranged.start, ranged.shown) == (datetime(2024, 3, 1, tzinfo=timezone.utc), "[2024-03-01, 2024-04-01) UTC")
    # a whole-table plan (a rebuild) with a range of January still holds March
    whole = run("jan-rebuild", 1, "2024-01-01", "2024-02-01", whole_table=True)
    assert (whole.start, whole.shown) == (None, "the whole table")
    assert [h.run_id for h in holding([whole], ranged, NOW, 24)] == ["jan-rebuild"]
    # a plan stored without the flag (an older version's) is taken as the whole table
    unsaid = run("old", 1, "2024-01-01", "2024-02-01")
    assert [h.run_id for h in holding([unsaid], ranged, NOW, 24)] == ["old"]
    assert holding([run("jan", 1, "2024-01-01", "2024-02-01", whole_table=False)], ranged, NOW, 24) == []


def test_two_names_of_one_location_are_one_table_and_two_locations_are_two():
    def at(run_id, table, location, seq):
        return make_lease(run_id, table, "ana@example.com", "staging", whole=False, start=date(2024, 3, 1),
                          end=date(2024, 3, 2), time_zone="UTC", planned_seq=seq, last_event_at=NOW, location=location)

    named = at("named", "sales.events", "file:/wh/sales.db/events", 1)
    by_path = at("by_path", "delta.`/wh/sales.db/events`", "file:///wh/sales.db/events/", 2)
    elsewhere = at("elsewhere", "delta.`/wh/copy/events`", "file:/wh/copy/events", 3)
    assert [h.run_id for h in holding([named], by_path, NOW, 24)] == ["named"]
    assert holding([named], elsewhere, NOW, 24) == []


def test_after_waits_for_a_run_of_any_table_until_it_is_final_and_notes_another_table():
    from backfill_lib.core.leases import after_note, wait_is_over

    running = lease("up", date(2024, 3, 1), date(2024, 4, 1), status="staging", table="db.upstream")
    assert not wait_is_over("staging", running, NOW, 24)
    assert wait_is_over("published", None, NOW, 24)  # final: its lease is gone from the ledger's list
    assert wait_is_over("failed", lease("gate", None, None, whole=True, status="failed", resumable=False), NOW, 24)
    assert wait_is_over("staging", lease("stale", None, None, whole=True, status="staging", age_hours=25), NOW, 24)
    # the same table in another spelling: no note; another table: waited for, with a note saying what it means
    assert after_note("up", "DB.Events", "db.`events`") is None
    assert after_note("up", "db.upstream", "db.events") == (
        "run up backfills db.upstream, not db.events: waiting orders this run after it (use it when this request "
        "reads db.upstream); it holds no range of db.events")


def test_cleanup_drops_only_staging_of_final_runs_past_the_age_and_outside_the_rollback_window():
    from backfill_lib.core.errors import ConfigError
    from backfill_lib.core.retention import judge_staging, parse_age

    assert (parse_age("30d"), parse_age("12h"), parse_age(" 90m ")) == (
        timedelta(days=30), timedelta(hours=12), timedelta(minutes=90))
    with pytest.raises(ConfigError, match="--older-than: '30' is not an age such as 30d, 12h or 90m"):
        parse_age("30")
    old, young = NOW - timedelta(days=40), NOW - timedelta(days=2)
    runs = [
        {"run_id": "pub_old", "status": "published", "staging_table": "s.a", "event_at": old,
         "rollback_until": old + timedelta(days=7)},
        {"run_id": "pub_window", "status": "published", "staging_table": "s.b", "event_at": old,
         "rollback_until": NOW + timedelta(days=1)},
        {"run_id": "abandoned_young", "status": "abandoned", "staging_table": "s.c", "event_at": young},
        {"run_id": "failed_old", "status": "failed", "staging_table": "s.d", "event_at": old},
        {"run_id": "unchanged_old", "status": "unchanged", "staging_table": "s.e", "event_at": old},
        {"run_id": "no_staging", "status": "published", "staging_table": None, "event_at": old},
    ]
    verdicts = judge_staging(runs, NOW, timedelta(days=30))
    assert [(v.run_id, v.drop) for v in verdicts] == [
        ("failed_old", False), ("pub_old", True), ("pub_window", False), ("unchanged_old", True),
        ("abandoned_young", False)]
    assert [v.kept_because for v in verdicts if not v.drop] == [
        "run is failed, not final", "inside its rollback window (until 2026-12-02 12:00 UTC; --force drops it "
        "anyway)", "last event 2026-11-29 12:00 UTC is younger than the age"]
    assert [v.run_id for v in judge_staging(runs, NOW, timedelta(days=30), force=True) if v.drop] == [
        "pub_old", "pub_window", "unchanged_old"]


# --- Spark --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("writer", ["another_process", "this_runner"])
def test_a_run_that_recorded_its_plan_after_an_overlapping_one_withdraws_before_writing(
        spark, settings, db, tmp_path, make_runner, monkeypatch, writer):
    # Both runs pass the first check at once; the later ``planned`` event withdraws. The confirmation runs while
    # the first batch reads its source, so this checks no batch writes before it and the run ends abandoned.
    # The other plan comes through another ledger writer (another process), or through this runner's own (its
    # commit is then one of this writer's, but of another run: the confirmation must still read the ledger).
    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import LeaseError
    from backfill_lib.ledger import Ledger, run_record
    from backfill_lib.run.leases import Leases
    from backfill_lib.runner import prepare
    from tests.fixtures import D8, D9, D10, FULL_SOURCE, events_request, make_events

    make_events(spark, db, FULL_SOURCE)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, _ = prepare(spark, settings, events_request(tmp_path / "a", db, start=D8, end=D9),
                       run_id=f"race_first_{writer}")
    second_request = events_request(tmp_path / "b", db, start=D9, end=D10)
    second, state = prepare(spark, settings, second_request, run_id=f"race_second_{writer}")
    other = Ledger(spark, settings.ledger_schema)  # the other process's ledger writer
    checked = Leases.take_turn

    def other_run_plans_meanwhile(self, plan):
        mark = checked(self, plan)
        writing = other if writer == "another_process" else self.ledger
        writing.record_run(run_record(first), "planned")
        writing.flush()
        return mark

    monkeypatch.setattr(Leases, "take_turn", other_run_plans_meanwhile)
    with pytest.raises(LeaseError) as err:
        make_runner().run(second, state)
    assert str(err.value).startswith(
        f"{second_request}: table {db}.events: run race_first_{writer} (owner ana@example.com, status planned) "
        "holds [2024-03-08, 2024-03-10) UTC, which overlaps this run's [2024-03-09, 2024-03-11) UTC; finish it")
    after = other.run(f"race_second_{writer}")
    assert (after["status"], after["message"].split(": run ")[0]) == (
        "abandoned", f"withdrawn at start: table {db}.events")
    assert not spark.catalog.tableExists(second.staging_table)  # no batch wrote
    assert current_version(spark, f"{db}.events") == 0
    monkeypatch.undo()
    assert make_runner().leases.abandon(f"race_first_{writer}", "test done").startswith(
        f"run race_first_{writer} (planned) abandoned")


def _race_plans(spark, settings, db, tmp_path, tag):
    """Two overlapping recompute plans of ``db.events``: ``{tag}_a`` over 2024-03-08..09, ``{tag}_b`` over
    2024-03-09..10 (the path of b's request is returned too, for its refusal)."""
    from backfill_lib.runner import prepare
    from tests.fixtures import D8, D9, D10, FULL_SOURCE, events_request, make_events

    make_events(spark, db, FULL_SOURCE)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, a_state = prepare(spark, settings, events_request(tmp_path / "a", db, start=D8, end=D9), run_id=f"{tag}_a")
    b_request = events_request(tmp_path / "b", db, start=D9, end=D10)
    b, b_state = prepare(spark, settings, b_request, run_id=f"{tag}_b")
    return (a, a_state), (b, b_state), b_request


def test_a_plan_stamped_first_but_committed_after_an_overlapping_one_withdraws(
        spark, settings, db, tmp_path, make_runner, monkeypatch):
    # This run (b) stamps its plan, then another process (a) stamps and commits its own before b's commit lands.
    # b then sees a with a later stamp; by stamps b would go on, and a, whose confirmation saw nothing, too.
    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import LeaseError
    from backfill_lib.ledger import EventWriter, Ledger, run_record

    (a, _), (b, b_state), b_request = _race_plans(spark, settings, db, tmp_path, "late_commit")
    other = Ledger(spark, settings.ledger_schema)  # a's process
    insert = EventWriter._insert
    overtaken = []

    def a_commits_first(self, name, rows):
        if self is not other and name == "runs" and not overtaken and any(
                r["run_id"] == b.run_id and r["status"] == "planned" for r in rows):
            overtaken.append(other.record_run(run_record(a), "planned")["run_id"])
            other.flush()
        return insert(self, name, rows)

    monkeypatch.setattr(EventWriter, "_insert", a_commits_first)
    with pytest.raises(LeaseError) as err:
        make_runner().run(b, b_state)
    monkeypatch.undo()
    assert overtaken == [a.run_id]
    assert str(err.value).startswith(f"{b_request}: table {db}.events: run {a.run_id} (owner ana@example.com, "
                                     f"status planned) holds [2024-03-08, 2024-03-10) UTC")
    assert other.run(b.run_id)["status"] == "abandoned"
    assert current_version(spark, f"{db}.events") == 0
    assert make_runner().leases.abandon(a.run_id, "test done").startswith(f"run {a.run_id} (planned) abandoned")


def test_a_plan_committed_first_goes_on_though_an_overlapping_plan_stamped_earlier_commits_after_it(
        spark, settings, db, tmp_path, make_runner, monkeypatch):
    # The other side of the race above: this run (a) committed its plan first; the other process's plan (b),
    # stamped earlier, lands before a's confirmation reads the ledger. a goes on and publishes (b withdraws
    # when it confirms).
    from backfill_lib.ledger import Ledger, run_record
    from backfill_lib.run.leases import Leases

    (a, a_state), (b, _), _ = _race_plans(spark, settings, db, tmp_path, "early_stamp")
    other = Ledger(spark, settings.ledger_schema)  # b's process
    confirm = Leases.confirm
    stamps = []

    def b_lands_before_the_read(self, plan, planned_seq, mark):
        stamps.append(planned_seq)
        self.ledger.wait_committed(planned_seq)
        stamp = self.ledger.run(plan.run_id)["event_at"]
        other._insert("runs", [{**run_record(b), "status": "planned", "seq": planned_seq - 10**9, "event_at": stamp}])
        return confirm(self, plan, planned_seq, mark)

    monkeypatch.setattr(Leases, "confirm", b_lands_before_the_read)
    result = make_runner().run(a, a_state)
    monkeypatch.undo()
    assert result.status == "published"
    assert other.run(b.run_id)["seq"] < stamps[0]  # b's plan carries the earlier stamp
    assert make_runner().leases.abandon(b.run_id, "test done").startswith(f"run {b.run_id} (planned) abandoned")


@pytest.mark.parametrize("how", ["lapsed", "released"])
def test_a_resume_after_its_lease_lapsed_is_refused_while_another_run_holds_the_range(
        spark, settings, db, tmp_path, make_runner, how):
    # a crashed and nobody resumed it for longer than lease_hours (or it failed in a way that releases its
    # lease at once); b then took the overlapping range and still holds it. Resuming a now would stage beside
    # b: refused, before anything is written.
    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import LeaseError
    from backfill_lib.ledger import Ledger, run_record

    (a, _), (b, _), _ = _race_plans(spark, settings, db, tmp_path, how)
    ledger = Ledger(spark, settings.ledger_schema)
    ledger.ensure()
    now = datetime.now(timezone.utc)
    a_events = [{**run_record(a), "status": "planned", "seq": 1, "event_at": now - timedelta(hours=25)}]
    if how == "released":  # a gate failed: not resumable as it is, so its lease is released at once
        a_events = [{**a_events[0], "event_at": now},
                    {**run_record(a), "plan_json": None, "status": "failed", "resumable": False, "seq": 2,
                     "event_at": now}]
    ledger._insert("runs", [*a_events, {**run_record(b), "status": "planned", "seq": 3, "event_at": now}])
    why = "lapsed (no event for 24 hours)" if how == "lapsed" else "was released when it failed"
    with pytest.raises(LeaseError) as err:
        make_runner().resume(a.run_id)
    assert str(err.value) == (
        f"run {a.run_id}: its lease of table {db}.events {why} and run {b.run_id} (owner ana@example.com, status planned) now holds [2024-03-09, 2024-03-11) UTC, which "
        f"overlaps this run's [2024-03-08, 2024-03-10) UTC; finish that run (`backfill resume {b.run_id}`) or "
        f"release it (`backfill abandon {b.run_id} --reason TEXT`) before resuming this one")
    assert ledger.run(a.run_id)["status"] == a_events[-1]["status"]  # nothing recorded, nothing staged
    assert not spark.catalog.tableExists(a.staging_table)
    assert current_version(spark, f"{db}.events") == 0


def test_a_run_alone_on_the_ledger_reads_the_leases_once(spark, settings, db, tmp_path, make_runner, monkeypatch):
    # Nothing but the run's own events reached the runs table between its turn and its plan's commit: the
    # confirmation has nothing new to read (the read stands before each batch's first write)
    from backfill_lib.ledger import Ledger
    from backfill_lib.runner import prepare
    from tests.fixtures import D8, D9, FULL_SOURCE, events_request, make_events

    make_events(spark, db, FULL_SOURCE)
    plan, state = prepare(spark, settings, events_request(tmp_path, db, start=D8, end=D9), run_id="alone")
    reads = []
    read = Ledger.leases
    monkeypatch.setattr(Ledger, "leases", lambda self, *a, **k: reads.append(a[0]) or read(self, *a, **k))
    assert make_runner().run(plan, state).status == "published"
    assert reads == [f"{db}.events"]


def test_a_second_overlapping_run_is_refused_until_the_first_is_final(spark, settings, db, tmp_path, make_runner):
    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import LeaseError, PublishError
    from backfill_lib.ledger import Ledger
    from backfill_lib.runner import prepare
    from tests.fixtures import D8, D9, D10, FULL_SOURCE, events_request, make_events

    make_events(spark, db, FULL_SOURCE)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # durable: the cleanup at the end looks at each run's staging table
    first_request = events_request(tmp_path / "a", db, start=D8, end=D9, staging="durable")
    second_request = events_request(tmp_path / "b", db, start=D9, end=D10, staging="durable")
    first, state = prepare(spark, settings, first_request, run_id="lease_first")
    assert make_runner().run(first, state, until="validate").status == "validated"

    second, state2 = prepare(spark, settings, second_request, run_id="lease_second")
    with pytest.raises(LeaseError) as err:
        make_runner().run(second, state2)
    assert str(err.value).startswith(
        f"{second_request}: table {db}.events: run lease_first (owner ana@example.com, status validated) holds "
        "[2024-03-08, 2024-03-10) UTC, which overlaps this run's [2024-03-09, 2024-03-11) UTC; finish it")
    ledger = Ledger(spark, settings.ledger_schema)
    assert ledger.find_run("lease_second") is None  # refused before its plan was recorded: nothing staged
    assert current_version(spark, f"{db}.events") == 0

    # the same table under its other names: with the catalog's name, and by its path (the lease's location)
    path = state.location.removeprefix("file:")
    for i, alias in enumerate((f"spark_catalog.{db}.events", f"delta.`{path}`")):
        (tmp_path / f"alias{i}").mkdir()
        aliased = events_request(tmp_path / f"alias{i}", db, start=D9, end=D10,
                                 target={"table": alias, "partition_column": "dt", "grain": "day"})
        with pytest.raises(LeaseError, match=r"run lease_first \(owner ana@example.com, status validated\) holds "
                                             r"\[2024-03-08, 2024-03-10\) UTC, which overlaps"):
            make_runner().run(*prepare(spark, settings, aliased, run_id=f"lease_alias{i}"))
        assert ledger.find_run(f"lease_alias{i}") is None

    # --after waits for the first run, which publishes meanwhile; then the second plans and takes the range
    waiting, outcome = make_runner(lease_poll_seconds=0.2), {}

    def after_first():
        outcome["waited"] = waiting.leases.wait_for("lease_first")
        outcome["result"] = waiting.run(*prepare(spark, settings, second_request, run_id="lease_second"))

    thread = threading.Thread(target=after_first)
    thread.start()
    assert make_runner().publish_validated("lease_first").status == "published"
    thread.join(timeout=600)
    assert (outcome["waited"], outcome["result"].status) == ("published", "published")
    assert current_version(spark, f"{db}.events") == 2

    # a run left validated is released by abandon; an abandoned run cannot be resumed
    (tmp_path / "c").mkdir()
    tenfold = f"SELECT id, dt, v * 100 AS v FROM {db}.events_src WHERE dt >= :range_start AND dt < :range_end"
    third, state3 = prepare(spark, settings, events_request(tmp_path / "c", db, start=D10, end=D10, sql=tenfold),
                            run_id="lease_third")
    assert make_runner().run(third, state3, until="validate").status == "validated"
    fourth, state4 = prepare(spark, settings, first_request, run_id="lease_fourth")
    assert make_runner().run(fourth, state4).status == "unchanged"  # 8..9 (no overlap with 10) as published
    fifth, state5 = prepare(spark, settings, second_request, run_id="lease_fifth")
    with pytest.raises(LeaseError, match="run lease_third \\(owner ana@example.com, status validated\\)"):
        make_runner().run(fifth, state5)
    assert make_runner().leases.abandon("lease_third", "superseded by lease_fifth") == (
        f"run lease_third (validated) abandoned: superseded by lease_fifth; its range of {db}.events is free")
    with pytest.raises(PublishError, match="run lease_third was abandoned \\(abandoned: superseded by lease_fifth\\)"):
        make_runner().resume("lease_third")
    assert make_runner().run(fifth, state5).status == "unchanged"
    with pytest.raises(PublishError, match="run lease_fifth is unchanged already; nothing to abandon"):
        make_runner().leases.abandon("lease_fifth", "too late")

    # cleanup: the staging of final runs past the age goes, not inside a published run's rollback window
    from backfill_lib.plan.prepare import utc_now
    from backfill_lib.run.cleanup import drop_staging, staging_verdicts

    ours = {"lease_first", "lease_second", "lease_third", "lease_fourth", "lease_fifth"}
    verdicts = [v for v in staging_verdicts(spark, ledger, utc_now(), timedelta(0)) if v.run_id in ours]
    assert sorted((v.run_id, v.drop) for v in verdicts) == [
        ("lease_fifth", True), ("lease_first", False), ("lease_fourth", True), ("lease_second", False),
        ("lease_third", True)]
    kept = next(v for v in verdicts if v.run_id == "lease_first")
    assert kept.kept_because.startswith("inside its rollback window (until ")
    forced = [v.run_id for v in staging_verdicts(spark, ledger, utc_now(), timedelta(0), force=True)
              if v.run_id in ours and v.drop]
    assert len(forced) == 5
    dropped = drop_staging(spark, ledger, [v for v in verdicts if v.drop])
    assert sorted(v.run_id for v in dropped) == ["lease_fifth", "lease_fourth", "lease_third"]
    assert not spark.catalog.tableExists(third.staging_table) and spark.catalog.tableExists(first.staging_table)
    # backfill status's list: one SHOW TABLES per schema; a name in a schema that is gone is not there
    from backfill_lib.run.cleanup import staging_kept

    assert staging_kept(spark, [first.staging_table.upper(), third.staging_table, None,
                                "no_such_schema_x.t"]) == {first.staging_table.upper()}
    after = ledger.run("lease_third")
    assert (after["status"], after["message"]) == (
        "abandoned", f"abandoned: superseded by lease_fifth; cleanup dropped staging table {third.staging_table}")
