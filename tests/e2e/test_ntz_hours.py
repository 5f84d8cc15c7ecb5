"""``TIMESTAMP_NTZ`` hour partitions (issue 43 item 8): wall-clock hours of the request's time zone.

An NTZ value is a wall-clock reading with no zone. The plan's hours are the wall-clock hours of the range that occur
in ``time_zone``, keyed as ``TIMESTAMP`` hours are (the first occurrence with the zone's offset): the hour a
spring-forward skips (2024-03-10 02:00 in New York) is no partition and no predicate covers it, and the hour a
fall-back repeats (2024-11-03 01:00) is one partition holding both real hours, since one wall-clock value names them.
"""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest
from chispa import assert_df_equality
from pyspark.sql.types import IntegerType, StructField, StructType, TimestampNTZType
from rich.console import Console

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import IntakeError, PartitionError, StrayRowsError
from backfill_lib.core.leases import in_instants
from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.partitions import (
    Grain,
    enumerate_partitions,
    half_open,
    partition_of_key,
    wall_value_key,
)
from backfill_lib.core.table_state import Column, PartitionStats, TableState
from backfill_lib.intake.request import BackfillRequest
from backfill_lib.plan.builder import build_plan
from backfill_lib.plan.explain import explain
from backfill_lib.plan.model import plan_from_summary
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from tests.conftest import write_request

NY = "America/New_York"
UTC = timezone.utc
HITS = StructType([StructField("id", IntegerType(), False), StructField("h", TimestampNTZType(), True),
                   StructField("v", IntegerType(), True)])
NOW = datetime(2024, 12, 1, 12, 0, tzinfo=UTC)


def wall(day: str, hour: int, minute: int = 0) -> datetime:
    """A naive wall-clock reading: how pyspark writes and returns a TIMESTAMP_NTZ."""
    return datetime.fromisoformat(day).replace(hour=hour, minute=minute)


def utc(day: str, hour: int) -> datetime:
    return datetime.fromisoformat(day).replace(hour=hour, tzinfo=UTC)


def hours(day: str, time_zone: str):
    first = date.fromisoformat(day)
    return enumerate_partitions(*half_open(first, first, Grain.HOUR, time_zone), Grain.HOUR, time_zone,
                                wall_clock=True)


# ---------------------------------------------------------------------------------------------- pure planning

def test_wall_hours_of_a_utc_day_a_spring_forward_night_and_a_fall_back_night():
    utc_day = hours("2024-06-01", "UTC")
    assert len(utc_day) == 24
    assert (utc_day[5].key, utc_day[5].start, utc_day[5].end) == (
        "2024-06-01T05:00:00+00:00", utc("2024-06-01", 5), utc("2024-06-01", 6))

    spring = hours("2024-03-10", NY)
    assert len(spring) == 23  # 02:00 does not occur: no partition, as for a TIMESTAMP column
    assert [p.key for p in spring[:4]] == ["2024-03-10T00:00:00-05:00", "2024-03-10T01:00:00-05:00",
                                           "2024-03-10T03:00:00-04:00", "2024-03-10T04:00:00-04:00"]
    assert spring[-1].key == "2024-03-10T23:00:00-04:00" and spring[-1].end == utc("2024-03-11", 4)

    fall = hours("2024-11-03", NY)
    assert len(fall) == 24  # a TIMESTAMP column has 25: the repeated 01:00 is one wall-clock value here
    assert [p.key for p in fall[:3]] == ["2024-11-03T00:00:00-04:00", "2024-11-03T01:00:00-04:00",
                                         "2024-11-03T02:00:00-05:00"]
    assert (fall[1].start, fall[1].end) == (utc("2024-11-03", 5), utc("2024-11-03", 7))  # both real 01:00 hours
    # a key names its partition back, the two-hour one included (a stored plan is rebuilt from its keys)
    assert partition_of_key(fall[1].key, Grain.HOUR, NY, wall_clock=True) == fall[1]
    assert partition_of_key("2024-11-03T01:00:00-05:00", Grain.HOUR, NY, wall_clock=True) == fall[1]


def test_wall_values_are_keyed_by_their_wall_clock_hour_and_a_skipped_or_partial_hour_has_no_key():
    assert wall_value_key("2024-03-10 03:00:00", NY) == "2024-03-10T03:00:00-04:00"  # as Delta writes the value
    assert wall_value_key("2024-11-03T01:00:00", NY) == "2024-11-03T01:00:00-04:00"
    assert wall_value_key("2024-03-10 02:00:00", NY) is None  # skipped by the spring-forward
    assert wall_value_key("2024-03-10 03:30:00", NY) is None  # not on the hour
    assert wall_value_key("not a time", NY) is None
    keys = PartitionKeys("h", Grain.HOUR, NY, wall_clock=True)
    assert keys.key("2024-11-03 01:00:00") == "2024-11-03T01:00:00-04:00"  # as Spark casts it to text
    assert keys.key("2024-03-10 02:15:00") == "2024-03-10 02:15:00"  # its own text: no planned partition's
    assert keys.key_of_value(wall("2024-03-10", 23)) == "2024-03-10T23:00:00-04:00"
    assert keys.of("x").wall_clock and keys.renamed({"h": "c0"}).column == "c0"


def ntz_state(partitions: dict, columns=None, generated=()) -> TableState:
    columns = columns or (Column("id", "int", False), Column("h", "timestamp_ntz"), Column("v", "int"))
    return TableState("db.hits", "file:/tmp/hits", 7, columns, ("h",), partitions, generated=generated)


def ntz_plan(day: str, time_zone: str, state: TableState, partition_column: str = "h"):
    request = BackfillRequest.model_validate({
        "name": "hits", "owner": "ana@example.com", "reason": "TEST-8", "strategy": "recompute",
        "target": {"table": "db.hits", "partition_column": partition_column, "grain": "hour"},
        "range": {"start": day, "end": day}, "time_zone": time_zone, "source": {"sql": "s.sql"}, "keys": ["id"]})
    return build_plan(request, state, request_path="r.yml", staging_schema="stg", batch_size=None, now=NOW,
                      run_id="bf_ntz")


def test_the_plan_of_a_spring_forward_night_lists_the_wall_hours_with_their_stats_and_predicates_skip_the_gap():
    state = ntz_state({"2024-03-10 01:00:00": PartitionStats(1, 100, 2, "a"),
                       "2024-03-10 02:00:00": PartitionStats(1, 100, 5, "b"),  # no hour of the zone
                       "2024-03-10 03:00:00": PartitionStats(2, 300, 4, "c"),
                       "2024-03-11 00:00:00": PartitionStats(1, 100, 9, "d")})  # outside the range
    plan = ntz_plan("2024-03-10", NY, state)
    assert len(plan.partitions) == 23 and plan.wall_clock
    assert [(p.key, p.current.rows) for p in plan.partitions[1:3]] == [
        ("2024-03-10T01:00:00-05:00", 2), ("2024-03-10T03:00:00-04:00", 4)]
    assert (plan.total.files, plan.total.rows) == (3, 6)
    assert plan.predicate() == (
        "((`h` >= TIMESTAMP_NTZ'2024-03-10 00:00:00' AND `h` < TIMESTAMP_NTZ'2024-03-10 02:00:00') OR "
        "(`h` >= TIMESTAMP_NTZ'2024-03-10 03:00:00' AND `h` < TIMESTAMP_NTZ'2024-03-11 00:00:00'))")
    assert plan.write_time_zone == NY  # an NTZ partition value is its wall clock in any zone
    assert plan.partition_keys.wall_clock
    back = plan_from_summary(plan.summary())
    assert back.partitions == plan.partitions and back.predicate() == plan.predicate()
    assert not in_instants(dict(plan.request.target), plan.range_type)  # leases compare the wall clock too


def test_the_plan_of_a_fall_back_night_has_one_two_hour_partition_for_the_repeated_wall_hour():
    state = ntz_state({"2024-11-03 01:00:00": PartitionStats(1, 100, 3, "a")})
    plan = ntz_plan("2024-11-03", NY, state)
    assert len(plan.partitions) == 24
    one = plan.partitions[1]
    assert (one.key, one.current.rows, one.partition.end) == ("2024-11-03T01:00:00-04:00", 3, utc("2024-11-03", 7))
    assert plan.predicate([one.partition]) == (
        "(`h` >= TIMESTAMP_NTZ'2024-11-03 01:00:00' AND `h` < TIMESTAMP_NTZ'2024-11-03 02:00:00')")
    assert plan_from_summary(plan.summary()).partitions[1] == one


def test_an_ntz_column_needs_the_hour_grain_and_a_day_grain_request_is_still_refused():
    state = ntz_state({})
    request = BackfillRequest.model_validate({
        "name": "hits", "owner": "ana@example.com", "reason": "TEST-8", "strategy": "recompute",
        "target": {"table": "db.hits", "partition_column": "h", "grain": "day"},
        "range": {"start": "2024-03-10", "end": "2024-03-10"}, "time_zone": NY, "source": {"sql": "s.sql"},
        "keys": ["id"]})
    with pytest.raises(IntakeError, match="table db.hits column h is timestamp_ntz, grain day needs date"):
        build_plan(request, state, request_path="r.yml", staging_schema="stg", batch_size=None, now=NOW)


def test_a_rebuild_without_range_refuses_an_ntz_value_the_zone_skips():
    request = BackfillRequest.model_validate({
        "name": "hits", "owner": "ana@example.com", "reason": "TEST-8", "strategy": "rebuild",
        "target": {"table": "db.hits", "partition_column": "h", "grain": "hour"}, "time_zone": NY,
        "source": {"sql": "s.sql"}, "keys": ["id"]})
    ok = build_plan(request, ntz_state({"2024-11-03 01:00:00": PartitionStats(1, 1, 1, "a"),
                                        "2024-11-03 03:00:00": PartitionStats(1, 1, 1, "b")}),
                    request_path="r.yml", staging_schema="stg", batch_size=None, now=NOW)
    assert [p.key for p in ok.partitions] == ["2024-11-03T01:00:00-04:00", "2024-11-03T03:00:00-05:00"]
    with pytest.raises(PartitionError, match="table db.hits holds TIMESTAMP_NTZ partition value "
                                             "'2024-03-10 02:00:00', which is no wall-clock hour of America/New_York"):
        build_plan(request, ntz_state({"2024-03-10 02:00:00": PartitionStats(1, 1, 1, "a")}),
                   request_path="r.yml", staging_schema="stg", batch_size=None, now=NOW)


# ------------------------------------------------------------------------------------ real Spark and Delta

def ntz_request(tmp_path, db, day, time_zone, sql=None, table="hits", column="h", reconcile=True):
    sql_file = tmp_path / "hits.sql"
    sql_file.write_text(sql or f"SELECT id, h, v * 10 AS v FROM {db}.hits_src WHERE h >= :range_start AND h < :range_end")
    suite = tmp_path / "hits.json"
    suite.write_text('{"name": "hits", "expectations": [{"type": "expect_column_values_to_be_unique", '
                     '"kwargs": {"column": "id"}}]}')
    src = {"table": f"{db}.hits_src", "partition_column": "h"}
    return write_request(
        tmp_path / "hits.yml", owner="ana@example.com", reason="TEST-8: NTZ hours",
        target={"table": f"{db}.{table}", "partition_column": column, "grain": "hour"},
        range={"start": day, "end": day}, time_zone=time_zone,
        strategy="recompute", source={"sql": str(sql_file)}, keys=["id"], expectations=str(suite),
        reconciliation=[{"name": "v_times_ten", "metric": "sum(v)", "source": {**src, "metric": "sum(v) * 10"}}]
        if reconcile else [])


def make_hits(spark, db, target, source):
    for name, rows in (("hits", target), ("hits_src", source)):
        spark.createDataFrame(rows, HITS).write.format("delta").partitionBy("h").saveAsTable(f"{db}.{name}")


def times_ten(rows, inside):
    return [(i, h, v * 10 if inside(h) else v) for i, h, v in rows]


def test_recompute_of_three_ntz_hours_in_utc_publishes_exactly_their_rows(spark, settings, db, tmp_path, runner):
    d = "2024-06-01"
    target = [(1, wall("2024-05-31", 23), 1), (2, wall(d, 5), 2), (3, wall(d, 6), 3), (4, wall(d, 6), 4),
              (5, wall(d, 7), 5), (6, wall("2024-06-02", 0), 6)]
    make_hits(spark, db, target, target)
    plan, state = prepare(spark, settings, ntz_request(tmp_path, db, d, "UTC"))
    assert len(plan.partitions) == 24
    assert [(p.key, p.current.rows) for p in plan.partitions[5:8]] == [
        ("2024-06-01T05:00:00+00:00", 1), ("2024-06-01T06:00:00+00:00", 2), ("2024-06-01T07:00:00+00:00", 1)]
    assert plan.total.rows == 4

    result = runner.run(plan, state)

    assert result.status == "published"
    assert [c for c in result.checks if not c.success] == []
    recon = {c.partition: (c.observed, c.expected) for c in result.checks if c.kind == "reconciliation"}
    assert recon["2024-06-01T06:00:00+00:00"] == ("70", "70")
    rows = {p["partition"]: p["rows"] for p in Ledger(spark, settings.ledger_schema).partitions(plan.run_id)}
    assert {k: n for k, n in rows.items() if n} == {"2024-06-01T05:00:00+00:00": 1, "2024-06-01T06:00:00+00:00": 2,
                                                   "2024-06-01T07:00:00+00:00": 1}
    expected = spark.createDataFrame(times_ten(target, lambda h: h.date() == date(2024, 6, 1)), HITS)
    assert_df_equality(spark.table(f"{db}.hits"), expected, ignore_row_order=True, ignore_nullable=True)


def test_recompute_across_a_new_york_spring_forward_night(spark, settings, db, tmp_path, runner):
    d = "2024-03-10"
    target = [(1, wall("2024-03-09", 23), 1), (2, wall(d, 0), 2), (3, wall(d, 1), 3), (4, wall(d, 3), 4),
              (5, wall(d, 4), 5), (6, wall(d, 5), 6), (7, wall("2024-03-11", 0), 7),
              (8, wall(d, 2), 8)]  # a wall clock New York never showed: no hour of the range
    source = target[:7]
    make_hits(spark, db, target, source)
    plan, state = prepare(spark, settings, ntz_request(tmp_path, db, d, NY))
    assert len(plan.partitions) == 23
    assert [(p.key, p.current.rows) for p in plan.partitions[:6]] == [
        ("2024-03-10T00:00:00-05:00", 1), ("2024-03-10T01:00:00-05:00", 1), ("2024-03-10T03:00:00-04:00", 1),
        ("2024-03-10T04:00:00-04:00", 1), ("2024-03-10T05:00:00-04:00", 1), ("2024-03-10T06:00:00-04:00", 0)]

    result = runner.run(plan, state)

    assert result.status == "published"
    assert [c for c in result.checks if not c.success] == []
    diffs = {d["partition"]: (d["inserted"], d["updated"], d["deleted"])
             for d in Ledger(spark, settings.ledger_schema).diffs(plan.run_id)}
    assert diffs == {"2024-03-10T00:00:00-05:00": (0, 1, 0), "2024-03-10T01:00:00-05:00": (0, 1, 0),
                     "2024-03-10T03:00:00-04:00": (0, 1, 0), "2024-03-10T04:00:00-04:00": (0, 1, 0),
                     "2024-03-10T05:00:00-04:00": (0, 1, 0)}
    # the 02:00 row is outside every planned hour: untouched, as are the neighbouring days
    expected = spark.createDataFrame(
        [(1, wall("2024-03-09", 23), 1), (2, wall(d, 0), 20), (3, wall(d, 1), 30), (4, wall(d, 3), 40),
         (5, wall(d, 4), 50), (6, wall(d, 5), 60), (7, wall("2024-03-11", 0), 7), (8, wall(d, 2), 8)], HITS)
    assert_df_equality(spark.table(f"{db}.hits"), expected, ignore_row_order=True, ignore_nullable=True)


def test_a_source_row_in_the_skipped_hour_is_a_stray_row_and_nothing_is_written(spark, settings, db, tmp_path,
                                                                                 runner):
    d = "2024-03-10"
    target = [(1, wall(d, 1), 1), (2, wall(d, 3), 2)]
    make_hits(spark, db, target, [*target, (3, wall(d, 2, 15), 3)])
    plan, state = prepare(spark, settings, ntz_request(tmp_path, db, d, NY))
    with pytest.raises(StrayRowsError, match=r"partition 2024-03-10 02:15:00 \(1 row\); nothing written"):
        runner.run(plan, state)
    assert current_version(spark, f"{db}.hits") == 0


def test_recompute_across_a_new_york_fall_back_night_keeps_both_real_01_00_hours_in_one(spark, settings, db,
                                                                                        tmp_path, runner):
    d = "2024-11-03"
    # ids 3 and 4 stand for rows of the first and the second real 01:00 hour: one wall-clock value holds both
    target = [(1, wall("2024-11-02", 23), 1), (2, wall(d, 0), 2), (3, wall(d, 1), 3), (4, wall(d, 1), 4),
              (5, wall(d, 2), 5), (6, wall("2024-11-04", 0), 6)]
    source = [*target, (7, wall(d, 1), 7)]
    make_hits(spark, db, target, source)
    plan, state = prepare(spark, settings, ntz_request(tmp_path, db, d, NY))
    assert len(plan.partitions) == 24
    assert [(p.key, p.current.rows) for p in plan.partitions[:3]] == [
        ("2024-11-03T00:00:00-04:00", 1), ("2024-11-03T01:00:00-04:00", 2), ("2024-11-03T02:00:00-05:00", 1)]
    assert plan.partitions[1].partition.end == utc(d, 7)

    result = runner.run(plan, state)

    assert result.status == "published"
    assert [c for c in result.checks if not c.success] == []
    diffs = {d["partition"]: (d["inserted"], d["updated"])
             for d in Ledger(spark, settings.ledger_schema).diffs(plan.run_id)}
    assert diffs == {"2024-11-03T00:00:00-04:00": (0, 1), "2024-11-03T01:00:00-04:00": (1, 2),
                     "2024-11-03T02:00:00-05:00": (0, 1)}
    expected = spark.createDataFrame(times_ten(source, lambda h: h.date() == date(2024, 11, 3)), HITS)
    assert_df_equality(spark.table(f"{db}.hits"), expected, ignore_row_order=True, ignore_nullable=True)


def test_backfill_plan_lists_the_wall_hours(spark, settings, db, tmp_path):
    d = "2024-11-03"
    make_hits(spark, db, [(1, wall(d, 1), 1)], [(1, wall(d, 1), 1)])
    plan, _ = prepare(spark, settings, ntz_request(tmp_path, db, d, NY))
    console = Console(record=True, width=400)
    console.print(explain(plan))
    text = console.export_text()
    lines = {x.split("  ", 1)[0]: x.split("  ", 1)[1].strip() for x in text.splitlines() if "  " in x}
    assert lines["partitions"] == (f"24 x hour on h (time zone {NY}), first 2024-11-03T00:00:00-04:00, "
                                   "last 2024-11-03T23:00:00-05:00")
    assert lines["layout"] == (
        f"partitioned by (h); the range is on h (timestamp_ntz, grain hour: wall-clock hours of {NY}; an hour a "
        "daylight-saving spring-forward skips is no partition, and the hour a fall-back repeats is one partition "
        "holding both)")
    assert "2024-11-03T01:00:00-04:00" in text and "2024-11-03T01:00:00-05:00" not in text


def test_a_generated_ntz_hour_partition_the_source_omits_is_computed(spark, settings, db, tmp_path, runner):
    """The other layout: ``h TIMESTAMP_NTZ GENERATED ALWAYS AS (CAST(date_trunc('HOUR', ts) AS TIMESTAMP_NTZ))``
    (``date_trunc`` returns a TIMESTAMP), in New York: NTZ partitions are written in the run's zone, so Delta
    computes the column when publishing as staging did."""
    spark.sql(f"CREATE TABLE {db}.events (id INT NOT NULL, ts TIMESTAMP_NTZ, v INT, h TIMESTAMP_NTZ GENERATED "
              "ALWAYS AS (CAST(date_trunc('HOUR', ts) AS TIMESTAMP_NTZ))) USING delta PARTITIONED BY (h)")
    spark.sql(f"INSERT INTO {db}.events (id, ts, v) VALUES (1, TIMESTAMP_NTZ'2024-03-09 23:10:00', 1), "
              "(2, TIMESTAMP_NTZ'2024-03-10 01:20:00', 2), (3, TIMESTAMP_NTZ'2024-03-10 03:40:00', 3)")
    spark.sql(f"CREATE TABLE {db}.hits_src (id INT NOT NULL, ts TIMESTAMP_NTZ, v INT) USING delta")
    spark.sql(f"INSERT INTO {db}.hits_src SELECT id, ts, v FROM {db}.events")
    sql = f"SELECT id, ts, v * 10 AS v FROM {db}.hits_src WHERE ts >= :range_start AND ts < :range_end"
    plan, state = prepare(spark, settings, ntz_request(tmp_path, db, "2024-03-10", NY, sql, "events", "h",
                                                          reconcile=False))
    assert [(p.key, p.current.rows) for p in plan.partitions[1:3]] == [
        ("2024-03-10T01:00:00-05:00", 1), ("2024-03-10T03:00:00-04:00", 1)]

    result = runner.run(plan, state)

    assert result.status == "published"
    got = spark.table(f"{db}.events").select("id", "v", "h").orderBy("id").collect()
    assert [tuple(r) for r in got] == [(1, 1, wall("2024-03-09", 23)), (2, 20, wall("2024-03-10", 1)),
                                       (3, 30, wall("2024-03-10", 3))]
