"""A resume whose lease lapsed, on an hourly ``TIMESTAMP`` target, against a run of another zone.

Run a asks for 2024-03-10 in New York, the spring-forward day: 23 hours, [05:00Z, 04:00Z on the 11th) (midnight
EST to midnight EDT; 02:00 EST, 07:00Z, jumps to 03:00 EDT). Run b asks in UTC. An hour range of a ``TIMESTAMP``
column is compared in instants only (``leases.in_instants``), so whether b conflicts with a depends on the UTC
instants of a's 23-hour day, not on the dates as either request reads them.

A request's range is whole days of its zone (``DateRange``): a UTC request cannot cover only the hours around the
jump. Those cases are written as b's plan with its UTC bounds narrowed in the ledger (``_narrowed``), the shape a
plan stores an hour range in (``str(datetime)`` of UTC instants).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql.types import IntegerType, StructField, StructType, TimestampType

from tests.conftest import write_request

NY = "America/New_York"
HITS = StructType([StructField("id", IntegerType(), False), StructField("h", TimestampType(), True),
                   StructField("v", IntegerType(), True)])


def utc(day: int, hour: int) -> datetime:
    return datetime(2024, 3, day, hour, tzinfo=timezone.utc)


ROWS = [(1, utc(9, 23), 1), (2, utc(10, 6), 2), (3, utc(10, 7), 3), (4, utc(11, 3), 4), (5, utc(11, 4), 5)]


def _hits_request(folder, db, day: str, time_zone: str):
    folder.mkdir()
    sql_file = folder / "hits.sql"
    sql_file.write_text(f"SELECT id, h, v * 10 AS v FROM {db}.hits_src WHERE h >= :range_start AND h < :range_end")
    return write_request(
        folder / "hits.yml", owner="ana@example.com", reason="TEST-LZ: hourly recompute",
        target={"table": f"{db}.hits", "partition_column": "h", "grain": "hour"},
        range={"start": day, "end": day}, time_zone=time_zone, strategy="recompute",
        source={"sql": str(sql_file)}, keys=["id"])


def _plans(spark, settings, db, tmp_path, tag, b_day):
    """a: New York's 2024-03-10; b: UTC's ``b_day``; both recomputes of ``{db}.hits`` (hour grain, TIMESTAMP h)."""
    from backfill_lib.runner import prepare

    for name in ("hits", "hits_src"):
        spark.createDataFrame(ROWS, HITS).write.format("delta").partitionBy("h").saveAsTable(f"{db}.{name}")
    a, _ = prepare(spark, settings, _hits_request(tmp_path / "a", db, "2024-03-10", NY), run_id=f"{tag}_a")
    b, _ = prepare(spark, settings, _hits_request(tmp_path / "b", db, b_day, "UTC"), run_id=f"{tag}_b")
    return a, b


def _narrowed(record: dict, start: datetime | None, end: datetime | None) -> dict:
    """``record`` (``run_record(plan)``) with its plan's UTC bounds replaced by ``[start, end)`` (as a plan stores
    them) when given."""
    if start is None:
        return record
    summary = json.loads(record["plan_json"])
    summary["range_start"], summary["range_end_exclusive"] = str(start), str(end)
    return {**record, "plan_json": json.dumps(summary)}


def _lapsed_a_and_planned_b(spark, settings, a, b, b_hours):
    """a planned 25 hours ago and silent since (its lease lapsed); b planned now."""
    from backfill_lib.ledger import Ledger, run_record

    ledger = Ledger(spark, settings.ledger_schema)
    ledger.ensure()
    now = datetime.now(timezone.utc)
    ledger._insert("runs", [
        {**run_record(a), "status": "planned", "seq": 1, "event_at": now - timedelta(hours=25)},
        {**_narrowed(run_record(b), *b_hours), "status": "planned", "seq": 3, "event_at": now}])
    return ledger


@pytest.mark.parametrize("case, b_day, b_hours", [
    # b's real request: UTC 2024-03-10, [00Z, 00Z): shares a's first 19 hours, the jump among them
    ("utc_day", "2024-03-10", (None, None)),
    # b narrowed to 06:00Z..08:00Z: 01:00 EST and 03:00 EDT, the two New York hours either side of the jump
    ("jump_hours", "2024-03-10", (utc(10, 6), utc(10, 8))),
    # b narrowed to 07:00Z..08:00Z only: the hour that starts at the jump (03:00 EDT)
    ("jump_hour", "2024-03-10", (utc(10, 7), utc(10, 8))),
    # b the UTC day after: its 00Z..04Z are a's last four hours (20:00..23:00 EDT); a's day ends at 04:00Z
    ("utc_day_after", "2024-03-11", (None, None)),
])
def test_a_resume_of_a_lapsed_new_york_run_is_refused_by_a_utc_run_sharing_its_hours(
        spark, settings, db, tmp_path, make_runner, case, b_day, b_hours):
    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import LeaseError

    a, b = _plans(spark, settings, db, tmp_path, f"lz_{case}", b_day)
    # a's plan stores the 23 UTC hours of New York's spring-forward day; b's (real request) a whole UTC day
    assert len(a.partitions) == 23
    assert (a.summary()["range_start"], a.summary()["range_end_exclusive"]) == (
        "2024-03-10 05:00:00+00:00", "2024-03-11 04:00:00+00:00")
    assert (b.summary()["range_start"], b.summary()["range_end_exclusive"]) == (
        f"{b_day} 00:00:00+00:00", f"2024-03-{int(b_day[-2:]) + 1:02d} 00:00:00+00:00")
    ledger = _lapsed_a_and_planned_b(spark, settings, a, b, b_hours)
    b_summary = json.loads(_narrowed({"plan_json": json.dumps(b.summary())}, *b_hours)["plan_json"])
    with pytest.raises(LeaseError) as err:
        make_runner().resume(a.run_id)
    assert str(err.value) == (
        f"run {a.run_id}: its lease of table {db}.hits lapsed (no event for 24 hours) and run {b.run_id} (owner "
        f"ana@example.com, status planned) now holds [{b_summary['range_start']}, {b_summary['range_end_exclusive']}"
        f") UTC, which overlaps this run's [2024-03-10 05:00:00+00:00, 2024-03-11 04:00:00+00:00) {NY}; finish that "
        f"run (`backfill resume {b.run_id}`) or release it (`backfill abandon {b.run_id} --reason TEXT`) before "
        "resuming this one")
    assert ledger.run(a.run_id)["status"] == "planned"  # nothing recorded, nothing staged, nothing published
    assert not spark.catalog.tableExists(a.staging_table)
    assert current_version(spark, f"{db}.hits") == 0


@pytest.mark.parametrize("case, b_day, b_hours, refused", [
    # UTC 2024-03-09 ends at 00:00Z on the 10th, five hours before New York's midnight: no shared instant
    ("utc_day_before", "2024-03-09", (None, None), False),
    # the hour before New York's midnight EST (23:00 EST on the 9th): ends where a starts
    ("hour_before_midnight_est", "2024-03-10", (utc(10, 4), utc(10, 5)), False),
    # the day has 23 hours: a ends at 04:00Z (midnight EDT), not 05:00Z (24 hours after its start)
    ("hours_after_the_short_day", "2024-03-11", (utc(11, 4), utc(11, 6)), False),
    # ... and its last hour, 23:00 EDT, is 03:00Z..04:00Z: held by b, refused
    ("last_edt_hour", "2024-03-11", (utc(11, 3), utc(11, 4)), True),
    # the jump itself is no gap in instants: 01:00 EST (06Z) is followed by 03:00 EDT (07Z)
    ("hour_before_the_jump", "2024-03-10", (utc(10, 6), utc(10, 7)), True),
])
def test_the_resume_check_refuses_only_for_a_utc_run_sharing_an_instant_of_the_new_york_day(
        spark, settings, db, tmp_path, make_runner, case, b_day, b_hours, refused):
    from backfill_lib.core.errors import LeaseError

    a, b = _plans(spark, settings, db, tmp_path, f"lzc_{case}", b_day)
    ledger = _lapsed_a_and_planned_b(spark, settings, a, b, b_hours)
    record = ledger.run(a.run_id)
    runner = make_runner()
    if refused:
        with pytest.raises(LeaseError, match=f"lapsed \\(no event for 24 hours\\) and run {b.run_id} \\(owner"):
            runner.leases.check_resume(a, record, concurrent=False)
    else:
        assert runner.leases.check_resume(a, record, concurrent=False) is None
