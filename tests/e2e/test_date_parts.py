"""Issue 18, item 2: integer ``year``/``month``/``day`` (and ``hour``) partition columns that together hold the date
(``target.partition_columns``).

The pure tests (no Spark) come first; the Spark tests run real backfills on tiny inline Delta tables."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone

import pytest
from rich.console import Console

from backfill_lib.core.date_parts import hour_key, parts_predicate
from backfill_lib.core.errors import IntakeError, PartitionError, RequestError
from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.partitions import Grain, RowFilter, enumerate_partitions, half_open
from backfill_lib.core.table_state import Column, PartitionStats, TableState
from backfill_lib.intake.request import BackfillRequest, load_request
from backfill_lib.plan.builder import build_plan
from backfill_lib.plan.explain import explain
from backfill_lib.plan.model import plan_from_summary
from backfill_lib.plan.kinds import kind_for, merge_keys
from tests.conftest import write_request

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
YMD = {"year": "y", "month": "m", "day": "d"}
COLUMNS = (Column("id", "int"), Column("region", "string"), Column("y", "int"), Column("m", "int"),
           Column("d", "int"), Column("v", "int"))
SPEC = ("region", "y", "m", "d")


def parts_request(target: dict, start="2024-03-09", end="2024-03-09", strategy="recompute", **extra) -> BackfillRequest:
    return BackfillRequest.model_validate({
        "name": "parts", "owner": "ana@example.com", "reason": "TEST-18", "target": target,
        "range": {"start": start, "end": end}, "time_zone": extra.pop("time_zone", "UTC"), "strategy": strategy,
        "source": {"sql": "s.sql"}, "keys": ["id"], **extra})


def plan_of(request, state, where=None):
    return build_plan(request, state, request_path="r.yml", staging_schema="stg", batch_size=None, now=NOW,
                      run_id="bf_parts", where=where)


def table(partitions, columns=COLUMNS, spec=SPEC) -> TableState:
    return TableState("db.events", "file:/tmp/events", 4, columns, spec, partitions)


# --- pure ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target, message", [
    ({"partition_columns": {"year": "y", "month": "m"}}, "grain day needs exactly the parts year, month, day "
                                                         "(given: year, month)"),
    ({"partition_columns": YMD, "grain": "month"}, "grain month needs exactly the parts year, month (given: year, "
                                                   "month, day)"),
    ({"partition_columns": YMD, "partition_column": "dt"}, "give partition_column (one column) or "
                                                           "partition_columns"),
    ({"partition_columns": YMD, "partition_format": "yyyyMMdd"}, "partition_format applies to one string "
                                                                 "partition column"),
    ({"partition_columns": {"year": "y", "month": "y", "day": "d"}}, "one column names two parts (y, y, d)"),
])
def test_bad_partition_columns_are_refused_when_the_request_is_read(tmp_path, target, message):
    sql = tmp_path / "s.sql"
    sql.write_text("SELECT 1 AS id")
    path = write_request(tmp_path / "r.yml", owner="ana@example.com", reason="TEST-18",
                         target={"table": "db.events", **target}, range={"start": "2024-03-09", "end": "2024-03-09"},
                         strategy="recompute", source={"sql": str(sql)}, keys=["id"])
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert message in str(err.value)


def test_the_parts_predicate_selects_exactly_the_partitions_by_runs_of_values():
    days = enumerate_partitions(*half_open(date(2024, 2, 27), date(2024, 3, 1), Grain.DAY, "UTC"), Grain.DAY, "UTC")
    assert parts_predicate(("y", "m", "d"), days, Grain.DAY, "UTC") == (
        "((`y` = 2024 AND `m` = 2 AND `d` BETWEEN 27 AND 29) OR (`y` = 2024 AND `m` = 3 AND `d` = 1))")
    assert parts_predicate(("y", "m", "d"), [days[0], days[2]], Grain.DAY, "UTC", "t") == (
        "((t.`y` = 2024 AND t.`m` = 2 AND t.`d` = 27) OR (t.`y` = 2024 AND t.`m` = 2 AND t.`d` = 29))")
    months = enumerate_partitions(*half_open(date(2023, 11, 1), date(2024, 2, 1), Grain.MONTH, "UTC"), Grain.MONTH,
                                  "UTC")
    assert parts_predicate(("yr", "mo"), months, Grain.MONTH, "UTC") == (
        "((`yr` = 2023 AND `mo` BETWEEN 11 AND 12) OR (`yr` = 2024 AND `mo` BETWEEN 1 AND 2))")
    # a spring-forward night in New York: 23 hours, the wall clock skips 02
    ny = "America/New_York"
    hours = enumerate_partitions(*half_open(date(2024, 3, 10), date(2024, 3, 10), Grain.HOUR, ny), Grain.HOUR, ny)
    assert parts_predicate(("y", "m", "d", "h"), hours, Grain.HOUR, ny) == (
        "((`y` = 2024 AND `m` = 3 AND `d` = 10 AND `h` BETWEEN 0 AND 1) OR "
        "(`y` = 2024 AND `m` = 3 AND `d` = 10 AND `h` BETWEEN 3 AND 23))")


def test_partition_keys_of_parts_render_the_plan_keys_and_map_local_hours():
    keys = PartitionKeys("y/m/d", Grain.DAY, "UTC", parts=("y", "m", "d"))
    assert keys.columns == ("y", "m", "d")
    assert keys.key("2024-03-09") == "2024-03-09"
    assert keys.key_of_row({"y": 2024, "m": 3, "d": 9, "other": 1}) == "2024-03-09"
    assert keys.key_of_row({"y": 2024, "m": None, "d": 9}) is None
    assert keys.renamed({"y": "s1", "m": "s2", "d": "s3"}).columns == ("s1", "s2", "s3")
    hours = PartitionKeys("y/m/d/h", Grain.HOUR, "America/New_York", parts=("y", "m", "d", "h"))
    assert hours.key_of_row({"y": 2024, "m": 3, "d": 10, "h": 3}) == "2024-03-10T03:00:00-04:00"
    assert hours.rekey({"2024-03-10T01": 5}) == {"2024-03-10T01:00:00-05:00": 5}
    # no such hour: 02 of the spring-forward night, or February 30th, keep their text (no plan key has it)
    assert [hour_key(t, "America/New_York") for t in ("2024-03-10T02", "2024-02-30T01")] == [
        "2024-03-10T02", "2024-02-30T01"]


def test_a_parts_plan_takes_its_cost_from_the_log_and_publishes_on_the_integer_columns():
    target = {"table": "db.events", "partition_columns": YMD, "where": "region = 'EU'"}
    eu = RowFilter("region = 'EU'", "(region = 'EU')", "(t.region = 'EU')", ("region",))
    log = {"2024-03-08": PartitionStats(1, 100, 2, "a"), "2024-03-09": PartitionStats(2, 300, 5, "b"),
           "2024-02-30": PartitionStats(1, 10, 1, "odd")}
    plan = plan_of(parts_request(target, "2024-03-08", "2024-03-10"), table(log), eu)
    assert [(p.key, p.current.rows) for p in plan.partitions] == [("2024-03-08", 2), ("2024-03-09", 5),
                                                                  ("2024-03-10", 0)]
    assert plan.predicate() == "(`y` = 2024 AND `m` = 3 AND `d` BETWEEN 8 AND 10) AND ((region = 'EU'))"
    assert plan.partition_column == "y/m/d" and plan.range_columns == ("y", "m", "d")
    assert plan.partition_keys == PartitionKeys("y/m/d", Grain.DAY, "UTC", parts=("y", "m", "d"))
    patch = plan_of(parts_request(target, "2024-03-09", "2024-03-09", strategy="patch"), table(log), eu)
    assert merge_keys(patch) == ("id", "y", "m", "d")  # a changes_only recompute's MERGE: a moved key is a delete
    assert kind_for(patch.strategy).publish_statement(patch) == (
        "MERGE INTO db.events t USING staged s ON t.`id` <=> s.`id` AND (t.`y` = 2024 AND t.`m` = 3 AND t.`d` = 9) "
        "AND ((t.region = 'EU'))")
    again = plan_from_summary(json.loads(json.dumps(plan.summary())))
    assert (again.predicate(), again.partition_keys, again.partitions) == (
        plan.predicate(), plan.partition_keys, plan.partitions)
    console = Console(record=True, width=400)
    console.print(explain(plan))
    lines = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in console.export_text().splitlines()
             if "  " in line and not line.startswith(("│", "┃", "┏", "┡", "└"))}
    assert lines["layout"] == ("partitioned by (region, y, m, d); the range is on the integer date parts year=y, "
                               "month=m, day=d together, grain day: each partition is one value of each part; each "
                               "partition's cost sums its files over region")
    assert lines["publish statement"] == (
        "replaceWhere on db.events: (`y` = 2024 AND `m` = 3 AND `d` BETWEEN 8 AND 10) AND ((region = 'EU'))")


def test_hour_parts_on_a_spring_forward_night_plan_no_hour_2_and_a_row_there_is_a_stray_row():
    from backfill_lib.plan.model import stats_by_key
    from backfill_lib.run.staging import _stray_message

    ny = "America/New_York"
    hours = {"table": "db.events", "partition_columns": {**YMD, "hour": "h"}, "grain": "hour"}
    columns, spec = (*COLUMNS, Column("h", "int")), ("y", "m", "d", "h")
    # the log holds 2024-03-09 21:00 EST and a file of the skipped wall-clock hour 02 (keyed by its text), which
    # read as a UTC hour would be that same instant, 2024-03-10T02:00Z
    log = {"2024-03-09T21:00:00-05:00": PartitionStats(1, 100, 7, "real"), "2024-03-10T02": PartitionStats(1, 10, 1, "stray")}
    plan = plan_of(parts_request(hours, "2024-03-09", "2024-03-10", time_zone=ny), table(log, columns, spec))
    assert len(plan.partitions) == 24 + 23
    night = [p for p in plan.partitions if p.key.startswith("2024-03-10T0")]
    assert [p.key[11:] for p in night[:3]] == ["00:00:00-05:00", "01:00:00-05:00", "03:00:00-04:00"]
    assert next(p.current for p in plan.partitions if p.key == "2024-03-09T21:00:00-05:00") == log[
        "2024-03-09T21:00:00-05:00"]  # not the stray file's stats
    assert stats_by_key(log, Grain.HOUR, ny, keyed=True) == log  # the fence keys them alike
    # a row with h = 2 renders the text no planned partition has, the predicate leaves it out, and staging names it
    keys = plan.partition_keys
    assert keys.key_of_row({"y": 2024, "m": 3, "d": 10, "h": 2}) == "2024-03-10T02"
    assert "2024-03-10T02" not in {p.key for p in plan.partitions}
    assert "`h` BETWEEN 0 AND 1) OR (`y` = 2024 AND `m` = 3 AND `d` = 10 AND `h` BETWEEN 3 AND 23)" in plan.predicate()
    last = plan.batches[-1]
    assert _stray_message(plan, last, [{"p": "2024-03-10T02", "in_range": False, "in_where": True, "count": 1}]) == (
        f"source s.sql produced rows outside batch {last.index} [{last.keys[0]} .. {last.keys[-1]}] of db.events: "
        "partition 2024-03-10T02 (1 row); nothing written")
    # a rebuild plans the table's partitions: the skipped hour is refused, not read as a UTC hour
    whole = BackfillRequest.model_validate({**parts_request(hours, time_zone=ny).model_dump(), "range": None,
                                            "strategy": "rebuild"})
    with pytest.raises(PartitionError, match="^table db.events holds integer date parts 2024-03-10T02, which name no "
                                             "hour of America/New_York"):
        plan_of(whole, table(log, columns, spec))


def test_parts_that_do_not_fit_the_table_are_refused_at_intake():
    target = {"table": "db.events", "partition_columns": YMD}
    with pytest.raises(IntakeError, match="^r.yml: table db.events column d is not a partition column \\(partition columns: "
                                          "region, y, m\\): target.partition_columns names"):
        plan_of(parts_request(target), table({}, spec=("region", "y", "m")))
    typed = tuple(Column(c.name, "string") if c.name == "m" else c for c in COLUMNS)
    with pytest.raises(IntakeError, match="^r.yml: table db.events column m is string: target.partition_columns.month must "
                                          "be an integer column"):
        plan_of(parts_request(target), table({}, columns=typed))
    with pytest.raises(IntakeError, match="^r.yml: table db.events has no column dd \\(field target.partition_columns.day\\); its "
                                          "columns: id, region, y, m, d, v$"):
        plan_of(parts_request({**target, "partition_columns": {**YMD, "day": "dd"}}), table({}))
    on_day = RowFilter("d > 1", "(d > 1)", "(t.d > 1)", ("d",))
    with pytest.raises(IntakeError, match="reads d, the column the range selects; where narrows by the other "
                                          "partition columns \\(region\\)"):
        plan_of(parts_request({**target, "where": "d > 1"}), table({}), on_day)
    hours = {"table": "db.events", "partition_columns": {**YMD, "hour": "h"}, "grain": "hour"}
    columns = (*COLUMNS, Column("h", "int"))
    with pytest.raises(IntakeError) as err:  # the fall-back repeats 01:00: one set of values for two hours
        plan_of(parts_request(hours, "2024-11-03", "2024-11-03", time_zone="America/New_York"),
                table({}, columns=columns, spec=("y", "m", "d", "h")))
    assert str(err.value) == (
        "field 'target.partition_columns': the hours 2024-11-03T05:00+00:00 and 2024-11-03T06:00+00:00 (UTC) are "
        "both hour 1 of 2024-11-03 in America/New_York (a daylight-saving fall-back): their rows cannot be told "
        "apart in y/m/d/h; use time_zone UTC if the columns hold UTC hours, or a range that does not cross the "
        "fall-back")
    utc = plan_of(parts_request(hours, "2024-11-03", "2024-11-03"), table({}, columns=columns, spec=("y", "m", "d", "h")))
    assert len(utc.partitions) == 24 and utc.partitions[1].key == "2024-11-03T01:00:00+00:00"


# --- Spark: real backfills on tiny Delta tables -------------------------------------------------------------

from pyspark.sql.types import IntegerType, StructField, StructType  # noqa: E402

from tests.e2e.test_layouts import files_of, log_files, run, staging_tables  # noqa: E402

SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("y", IntegerType(), True),
                     StructField("m", IntegerType(), True), StructField("d", IntegerType(), True),
                     StructField("v", IntegerType(), True)])
# 2024-02-09 shares its day number with the recomputed 2024-03-09: only all three parts select a partition
ROWS = [(1, 2024, 3, 8, 1), (2, 2024, 3, 9, 2), (3, 2024, 3, 9, 3), (4, 2024, 3, 10, 4), (5, 2024, 2, 9, 5)]


def make_events(spark, db: str) -> None:
    spark.createDataFrame(ROWS, SCHEMA).coalesce(1).write.format("delta").partitionBy("y", "m", "d") \
        .saveAsTable(f"{db}.events")


def parts_file(tmp_path, db: str, sql: str, strategy: str = "recompute", day: str | None = "2024-03-09"):
    sql_file = tmp_path / "parts.sql"
    sql_file.write_text(sql)
    span = {"range": {"start": day, "end": day}} if day else {}
    return write_request(tmp_path / "parts.yml", owner="ana@example.com", reason="TEST-18: integer date parts",
                         target={"table": f"{db}.events", "partition_columns": YMD}, **span, time_zone="UTC",
                         strategy=strategy, source={"sql": str(sql_file)}, keys=["id"])


def test_recompute_of_one_day_of_a_year_month_day_table_after_a_stray_row_is_refused(spark, settings, db, tmp_path):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import StrayRowsError

    make_events(spark, db)
    # February 30th is no date: its row belongs to no planned partition
    stray = parts_file(tmp_path, db, f"SELECT id, y, m, IF(id = 3, 30, d) AS d, v FROM {db}.events "
                                     "WHERE make_date(y, m, d) >= :range_start AND make_date(y, m, d) < :range_end "
                                     "UNION ALL SELECT 9, 2024, 2, 30, 9")
    with pytest.raises(StrayRowsError) as err:
        run(spark, settings, stray)
    assert str(err.value).endswith(f"produced rows outside batch 0 [2024-03-09 .. 2024-03-09] of {db}.events: "
                                   "partition 2024-02-30 (1 row), 2024-03-30 (1 row); nothing written")
    assert current_version(spark, f"{db}.events") == 0
    assert staging_tables(spark, settings, db) == []

    request = parts_file(tmp_path, db, f"SELECT id, y, m, d, v * 10 AS v FROM {db}.events "
                                       "WHERE make_date(y, m, d) >= :range_start AND make_date(y, m, d) < :range_end "
                                       "UNION ALL SELECT 6, 2024, 3, 9, 60")
    outside = "NOT (y = 2024 AND m = 3 AND d = 9)"
    before_files, before_log = files_of(spark, f"{db}.events", outside), log_files(spark, f"{db}.events")

    result = run(spark, settings, request)

    assert result.status == "published"
    assert [(p.key, p.current.rows, p.current.files) for p in result.plan.partitions] == [("2024-03-09", 2, 1)]
    expected = [(1, 2024, 3, 8, 1), (2, 2024, 3, 9, 20), (3, 2024, 3, 9, 30), (6, 2024, 3, 9, 60),
                (4, 2024, 3, 10, 4), (5, 2024, 2, 9, 5)]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    assert current_version(spark, f"{db}.events") == 1 == result.published_version
    assert files_of(spark, f"{db}.events", outside) == before_files  # other days (and 2024-02-09): same files
    kept = {f for f in before_log if f[0] != json.dumps({"d": "9", "m": "3", "y": "2024"})}
    assert kept <= log_files(spark, f"{db}.events") and len(kept) == 3
    post = [(c.name, c.partition, c.success) for c in result.checks if c.kind == "post_publish"]
    assert post == [("written_rows_and_checksum_equal_staging", None, True),
                    ("rows_equal_staging_and_files_replaced", "2024-03-09", True)]
    from backfill_lib.ledger import Ledger

    diffs = {d["partition"]: (d["inserted"], d["updated"]) for d in Ledger(spark, settings.ledger_schema).diffs(
        result.plan.run_id)}
    assert diffs == {"2024-03-09": (1, 2)}  # keyed by the date the parts form


def test_patch_of_a_year_month_day_table_then_rollback_and_a_rebuild(spark, settings, db, tmp_path):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.cli import main

    make_events(spark, db)
    # id 2 is updated on 2024-03-09, id 6 inserted there; the other days are untouched (a staged id 5, which
    # lives on 2024-02-09, would be refused: tests/validate/test_keys_outside_range.py)
    patch = parts_file(tmp_path, db, "SELECT * FROM VALUES (2, 2024, 3, 9, 200), (6, 2024, 3, 9, 500) "
                                     "AS s(id, y, m, d, v)", strategy="patch")
    result = run(spark, settings, patch)
    assert result.status == "published"
    expected = [(1, 2024, 3, 8, 1), (2, 2024, 3, 9, 200), (3, 2024, 3, 9, 3), (6, 2024, 3, 9, 500),
                (4, 2024, 3, 10, 4), (5, 2024, 2, 9, 5)]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    assert current_version(spark, f"{db}.events") == 1

    assert main(["rollback", result.plan.run_id, "--by", "ana@example.com", "--reason", "TEST-18: undo"]) == 0
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(ROWS, SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)

    rebuild = parts_file(tmp_path, db, f"SELECT id, y, m, d, v + 100 AS v FROM {db}.events",
                         strategy="rebuild", day=None)
    rebuilt = run(spark, settings, rebuild)
    assert rebuilt.status == "published"
    assert [p.key for p in rebuilt.plan.partitions] == ["2024-02-09", "2024-03-08", "2024-03-09", "2024-03-10"]
    expected = [(i, y, m, d, v + 100) for i, y, m, d, v in ROWS]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    detail = spark.sql(f"DESCRIBE DETAIL {db}.events").first()
    assert list(detail["partitionColumns"]) == ["y", "m", "d"]


def test_recompute_of_one_day_of_a_table_whose_parts_are_generated_from_a_timestamp(spark, settings, db, tmp_path):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version

    spark.sql(f"CREATE TABLE {db}.events (id INT, ts TIMESTAMP, v INT, y INT GENERATED ALWAYS AS (year(ts)), "
              "m INT GENERATED ALWAYS AS (month(ts)), d INT GENERATED ALWAYS AS (day(ts))) USING delta "
              "PARTITIONED BY (y, m, d)")
    spark.sql(f"INSERT INTO {db}.events (id, ts, v) VALUES (1, TIMESTAMP'2024-03-08 12:00:00Z', 1), "
              "(2, TIMESTAMP'2024-03-09 12:00:00Z', 2), (3, TIMESTAMP'2024-03-09 15:00:00Z', 3), "
              "(4, TIMESTAMP'2024-03-10 12:00:00Z', 4), (5, TIMESTAMP'2024-02-09 12:00:00Z', 5)")
    # the source omits the parts: the run computes them by their expressions, as Delta would on write
    request = parts_file(tmp_path, db, f"SELECT id, ts, v * 10 AS v FROM {db}.events "
                                       "WHERE ts >= :range_start AND ts < :range_end "
                                       "UNION ALL SELECT 6, TIMESTAMP'2024-03-09 20:00:00Z', 60")
    outside = "NOT (y = 2024 AND m = 3 AND d = 9)"
    before_files, before_version = files_of(spark, f"{db}.events", outside), current_version(spark, f"{db}.events")

    result = run(spark, settings, request)

    assert result.status == "published"
    assert [(p.key, p.current.rows) for p in result.plan.partitions] == [("2024-03-09", 2)]
    expected = spark.sql(
        "SELECT id, CAST(ts AS TIMESTAMP) AS ts, v, year(ts) AS y, month(ts) AS m, day(ts) AS d FROM VALUES "
        "(1, TIMESTAMP'2024-03-08 12:00:00Z', 1), (2, TIMESTAMP'2024-03-09 12:00:00Z', 20), "
        "(3, TIMESTAMP'2024-03-09 15:00:00Z', 30), (6, TIMESTAMP'2024-03-09 20:00:00Z', 60), "
        "(4, TIMESTAMP'2024-03-10 12:00:00Z', 4), (5, TIMESTAMP'2024-02-09 12:00:00Z', 5) AS r(id, ts, v)")
    assert_df_equality(spark.table(f"{db}.events"), expected, ignore_row_order=True, ignore_nullable=True)
    assert sorted(tuple(r) for r in spark.table(f"{db}.events").select("id", "y", "m", "d").collect()) == [
        (1, 2024, 3, 8), (2, 2024, 3, 9), (3, 2024, 3, 9), (4, 2024, 3, 10), (5, 2024, 2, 9), (6, 2024, 3, 9)]
    assert current_version(spark, f"{db}.events") == before_version + 1 == result.published_version
    assert files_of(spark, f"{db}.events", outside) == before_files  # other days (and 2024-02-09): same files
