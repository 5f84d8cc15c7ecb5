"""Issue 18, item 3: the range on a data column of an unpartitioned or liquid-clustered table.

The pure tests (no Spark) come first: which files overlap which partitions, the plan's cost and layout lines.
The Spark tests run real backfills on tiny inline Delta tables whose days sit in files of their own."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from backfill_lib.core.errors import IntakeError
from backfill_lib.core.file_ranges import FileRange, overlap_stats, range_cost
from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.partitions import Grain, enumerate_partitions
from backfill_lib.core.table_state import Column, TableState
from backfill_lib.intake.request import BackfillRequest
from backfill_lib.plan.builder import build_plan
from backfill_lib.plan.explain import layout_line
from backfill_lib.plan.model import plan_from_summary
from backfill_lib.plan.kinds import kind_for

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
UTC = timezone.utc
D8, D9, D10, D11 = date(2024, 3, 8), date(2024, 3, 9), date(2024, 3, 10), date(2024, 3, 11)


# --- pure -----------------------------------------------------------------------------------------------------

def test_a_file_counts_in_every_partition_its_min_max_overlaps_and_its_rows_only_where_it_lies_wholly():
    days = enumerate_partitions(D9, D11, Grain.DAY, "UTC")  # 2024-03-09 and 2024-03-10
    files = [FileRange("inside9", 100, 7, D9, D9), FileRange("spans", 90, 5, D8, D10),
             FileRange("before", 50, 3, D8, D8), FileRange("nostats", 40, None, None, None)]
    stats = overlap_stats(days, files, Grain.DAY, "UTC", timestamps=False)
    assert [(k, s.files, s.bytes, s.rows) for k, s in stats.items()] == [
        ("2024-03-09", 3, 100 + 45 + 20, None), ("2024-03-10", 2, 45 + 20, None)]
    only_inside = overlap_stats(days, files[:1], Grain.DAY, "UTC", timestamps=False)
    assert only_inside["2024-03-09"].rows == 7 and only_inside["2024-03-10"].rows == 0
    # A file overlapping one planned day but holding other days' rows (or NULLs) says nothing of that day's rows.
    one_day = days[:1]
    assert overlap_stats(one_day, [FileRange("wide", 90, 5, D8, D10)], Grain.DAY, "UTC", False)["2024-03-09"].rows is None
    with_null = FileRange("null", 90, 5, D9, D9, nulls=1)
    assert overlap_stats(one_day, [with_null], Grain.DAY, "UTC", False)["2024-03-09"].rows is None
    assert range_cost(one_day, [FileRange("wide", 90, 5, D8, D10)], Grain.DAY, "UTC", False)[0].rows is None
    cost, no_stats = range_cost(days, files, Grain.DAY, "UTC", timestamps=False)
    assert (cost.files, cost.bytes, cost.rows, no_stats) == (3, 230, None, 1)


def test_timestamp_files_fall_into_the_days_of_the_request_zone_with_the_millisecond_of_truncated_statistics():
    days = enumerate_partitions(D9, D10, Grain.DAY, "America/New_York")  # 2024-03-09 05:00Z .. 2024-03-10 05:00Z
    late = FileRange("late", 10, 1, datetime(2024, 3, 10, 4, 59, tzinfo=UTC), datetime(2024, 3, 10, 4, 59, tzinfo=UTC))
    next_day = FileRange("next", 10, 1, datetime(2024, 3, 10, 5, 0, tzinfo=UTC), datetime(2024, 3, 10, 6, 0, tzinfo=UTC))
    # a maximum Delta truncated to 04:59:59.999 hides at most 04:59:59.999999: still 2024-03-08 in New York
    edge = FileRange("edge", 10, 1, datetime(2024, 3, 9, 4, 0, tzinfo=UTC),
                     datetime(2024, 3, 9, 4, 59, 59, 999000, tzinfo=UTC))
    stats = overlap_stats(days, [late, next_day, edge], Grain.DAY, "America/New_York", timestamps=True)
    assert stats["2024-03-09"].files == 1 and stats["2024-03-09"].rows == 1
    edge_before = FileRange("edge", 10, 1, datetime(2024, 3, 9, 4, 0, tzinfo=UTC),
                            datetime(2024, 3, 9, 4, 59, 59, 998000, tzinfo=UTC))
    assert overlap_stats(days, [edge_before], Grain.DAY, "America/New_York", True)["2024-03-09"].files == 0


def test_keys_of_a_timestamp_data_column_are_its_local_days():
    keys = PartitionKeys("ts", Grain.DAY, "America/New_York", data_type="timestamp")
    assert keys.key_of_value(datetime(2024, 3, 10, 3, 30, tzinfo=UTC)) == "2024-03-09"
    hours = PartitionKeys("ts", Grain.HOUR, "Asia/Kolkata", data_type="timestamp")
    assert hours.key_of_value(datetime(2024, 3, 10, 3, 59, tzinfo=UTC)) == "2024-03-10T09:00:00+05:30"


def test_statistics_are_read_as_instants_whatever_offset_the_writer_rendered_them_with():
    from backfill_lib.adapters.delta_log import _stat_value

    # Delta renders timestamp statistics in the writing session's zone: the same instant, other text.
    assert _stat_value("2024-11-03T00:00:00.000-04:00", "timestamp") == datetime(2024, 11, 3, 4, 0, tzinfo=UTC)
    assert _stat_value("2024-11-03T04:00:00.000Z", "timestamp") == datetime(2024, 11, 3, 4, 0, tzinfo=UTC)
    assert _stat_value("2024-03-09", "date") == D9
    assert _stat_value("garbage", "date") is None and _stat_value(None, "timestamp") is None


def request_of(target: dict, strategy="recompute", start=D9, end=D9, **extra) -> BackfillRequest:
    return BackfillRequest.model_validate({
        "name": "data_column", "owner": "ana@example.com", "reason": "TEST-18: data columns", "target": target,
        "range": {"start": start, "end": end}, "time_zone": extra.pop("time_zone", "UTC"), "strategy": strategy,
        "source": {"sql": "s.sql"}, "keys": ["id"], **extra})


def state_of(columns, files, partition_columns=(), clustering=()) -> TableState:
    return TableState("db.events", "/tmp/db/events", 4, tuple(columns), tuple(partition_columns),
                      clustering_columns=tuple(clustering), files=tuple(files))


COLUMNS = [Column("id", "int", False), Column("d", "date"), Column("v", "int")]


def test_a_plan_on_a_clustered_tables_data_column_takes_its_cost_from_min_max_and_says_so():
    files = [FileRange("a", 100, 2, D9, D9), FileRange("b", 80, 3, D10, D10), FileRange("c", 60, None, None, None)]
    plan = build_plan(request_of({"table": "db.events", "partition_column": "d"}, end=D10),
                      state_of(COLUMNS, files, clustering=["d"]), request_path="r.yml", staging_schema="stg",
                      batch_size=None, now=NOW)
    assert plan.range_in_data and plan.partition_spec == () and plan.clustering_columns == ("d",)
    assert [(p.key, p.current.files, p.current.rows) for p in plan.partitions] == [
        ("2024-03-09", 2, None), ("2024-03-10", 2, None)]
    assert (plan.total.files, plan.total.bytes, plan.files_without_stats) == (3, 240, 1)
    line = layout_line(plan)
    assert line.startswith("not partitioned, liquid-clustered by (d), kept by the publishing commit; the range is on "
                           "data column d (date, grain day)")
    assert line.endswith("1 of the files have no statistics for the column, so they count in every partition and "
                         "their rows are unknown")
    assert kind_for(plan.strategy).publish_statement(plan) == (
        "replaceWhere on db.events: (`d` >= DATE'2024-03-09' AND `d` < DATE'2024-03-11')")
    again = plan_from_summary(plan.summary())
    assert (again.range_in_data, again.clustering_columns, again.total) == (True, ("d",), plan.total)


def test_a_timestamp_data_column_of_a_day_grain_is_selected_by_the_request_zones_midnights():
    columns = [Column("id", "int", False), Column("ts", "timestamp"), Column("v", "int")]
    request = request_of({"table": "db.events", "partition_column": "ts"}, time_zone="America/New_York")
    plan = build_plan(request, state_of(columns, []), request_path="r.yml", staging_schema="stg", batch_size=None,
                      now=NOW)
    assert plan.predicate() == ("(`ts` >= TIMESTAMP'2024-03-09 05:00:00+00:00' AND "
                                "`ts` < TIMESTAMP'2024-03-10 05:00:00+00:00')")
    assert plan.write_time_zone == "America/New_York"


@pytest.mark.parametrize("target, message", [
    ({"table": "db.events", "partition_column": "d", "partition_format": "yyyy-MM-dd"},
     "table db.events column d is not a partition column (partition columns: none): target.partition_format "
     "applies to a string partition column only; a data column carrying the range must be a date or timestamp"),
    ({"table": "db.events", "partition_column": "d", "grain": "hour"},
     "table db.events column d is date, grain hour needs a timestamp"),
    ({"table": "db.events", "partition_column": "v"},
     "table db.events column v is int, grain day needs date or timestamp (a data column carrying the range must be "
     "a date or a timestamp)"),
])
def test_a_data_column_that_cannot_carry_the_range_is_refused_at_intake(target, message):
    with pytest.raises(IntakeError) as err:
        build_plan(request_of(target), state_of(COLUMNS, []), request_path="r.yml", staging_schema="stg",
                   batch_size=None, now=NOW)
    assert str(err.value) == f"r.yml: {message}"


# --- Spark: real backfills on tiny Delta tables -----------------------------------------------------------------

from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import DateType, IntegerType, StructField, StructType, TimestampType  # noqa: E402

from tests.e2e.test_layouts import files_of, run, spark_request, staging_tables  # noqa: E402

DATED = StructType([StructField("id", IntegerType(), False), StructField("d", DateType(), True),
                    StructField("v", IntegerType(), True)])
TIMED = StructType([StructField("id", IntegerType(), False), StructField("ts", TimestampType(), True),
                    StructField("v", IntegerType(), True)])


def write_by_day(spark, rows, schema, table: str, column: str, create_sql: str | None = None) -> None:
    """``table`` with one data file per distinct value-day of ``rows`` (one append each), as a table written
    day by day holds them; ``create_sql`` creates it first (a clustered table)."""
    if create_sql:
        spark.sql(create_sql)
    df = spark.createDataFrame(rows, schema)
    for day in sorted({r[1].date() if isinstance(r[1], datetime) else r[1] for r in rows}):
        part = df.where(F.to_date(F.col(column)) == F.lit(day)).coalesce(1)
        part.write.format("delta").mode("append").saveAsTable(table)


def test_recompute_of_one_day_of_an_unpartitioned_table(spark, settings, db, tmp_path):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.runner import prepare

    target = [(1, D8, 1), (2, D8, 2), (3, D9, 3), (4, D9, 4), (5, D10, 5)]
    write_by_day(spark, target, DATED, f"{db}.events", "d")
    spark.createDataFrame([(1, D8, 1), (3, D9, 3), (6, D9, 6), (5, D10, 5)], DATED).write.format("delta") \
        .saveAsTable(f"{db}.src")
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "d"},
                            f"SELECT id, d, v * 10 AS v FROM {db}.src WHERE d >= :range_start AND d < :range_end")
    plan, _ = prepare(spark, settings, request)
    assert [(p.key, p.current.files, p.current.rows) for p in plan.partitions] == [("2024-03-09", 1, 2)]
    before_version = current_version(spark, f"{db}.events")
    outside = "d <> DATE'2024-03-09'"
    before_files = files_of(spark, f"{db}.events", outside)

    result = run(spark, settings, request)

    assert result.status == "published"
    expected = [(1, D8, 1), (2, D8, 2), (3, D9, 30), (6, D9, 60), (5, D10, 5)]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, DATED),
                       ignore_row_order=True, ignore_nullable=True)
    assert current_version(spark, f"{db}.events") == before_version + 1 == result.published_version
    assert files_of(spark, f"{db}.events", outside) == before_files  # rows outside the range: the same files
    post = [(c.name, c.partition, c.success) for c in result.checks if c.kind == "post_publish"]
    assert post == [("rows_and_checksum_equal_staging", "2024-03-09", True)]


def test_a_stray_row_of_a_data_column_is_refused_with_nothing_written(spark, settings, db, tmp_path):
    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import StrayRowsError

    write_by_day(spark, [(1, D8, 1), (3, D9, 3), (5, D10, 5)], DATED, f"{db}.events", "d")
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "d"},
                            f"SELECT id, d, v FROM {db}.events WHERE d >= :range_start - INTERVAL 1 DAY "
                            "AND d < :range_end")
    before = current_version(spark, f"{db}.events")
    with pytest.raises(StrayRowsError) as err:
        run(spark, settings, request)
    assert "partition 2024-03-08 (1 row)" in str(err.value) and str(err.value).endswith("nothing written")
    assert current_version(spark, f"{db}.events") == before
    assert staging_tables(spark, settings, db) == []


def clustered_events(spark, db: str) -> list[tuple]:
    """``db.events`` CLUSTER BY (ts), one file per row, rows around the Kolkata midnights of 2024-03-09
    (2024-03-08 18:30Z) and 2024-03-10 (2024-03-09 18:30Z); returns the rows."""
    at = lambda *a: datetime(*a, tzinfo=UTC)  # noqa: E731
    rows = [(1, at(2024, 3, 8, 18, 0), 1),    # 2024-03-08 23:30 Kolkata (13:00 New York)
            (2, at(2024, 3, 8, 18, 30), 2),   # 2024-03-09 00:00 Kolkata (but 2024-03-08 in New York)
            (3, at(2024, 3, 9, 10, 0), 3),    # 2024-03-09 15:30 Kolkata
            (4, at(2024, 3, 9, 19, 0), 4)]    # 2024-03-10 00:30 Kolkata (but 2024-03-09 in New York)
    spark.sql(f"CREATE TABLE {db}.events (id INT NOT NULL, ts TIMESTAMP, v INT) USING delta CLUSTER BY (ts)")
    for row in rows:
        spark.createDataFrame([row], TIMED).coalesce(1).write.format("delta").mode("append").saveAsTable(f"{db}.events")
    return rows


def test_recompute_and_patch_of_a_clustered_table_in_the_request_zone_keep_its_clustering(spark, settings, db,
                                                                                          tmp_path):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version

    assert settings.time_zone == "America/New_York"  # the request's zone is another
    rows = clustered_events(spark, db)
    detail = lambda: spark.sql(f"DESCRIBE DETAIL {db}.events").first()["clusteringColumns"]  # noqa: E731
    assert detail() == ["ts"]
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "ts"},
                            f"SELECT id, ts, v * 10 AS v FROM {db}.events VERSION AS OF 4 "
                            "WHERE ts >= :range_start AND ts < :range_end", time_zone="Asia/Kolkata")
    result = run(spark, settings, request)
    assert result.status == "published"
    assert [(p.key, p.current.files, p.current.rows) for p in result.plan.partitions] == [("2024-03-09", 2, 2)]
    expected = [rows[0], (2, rows[1][1], 20), (3, rows[2][1], 30), rows[3]]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, TIMED),
                       ignore_row_order=True, ignore_nullable=True)
    assert detail() == ["ts"]
    version = current_version(spark, f"{db}.events")
    assert version == 5

    patch = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "ts"},
                          "SELECT 3 AS id, TIMESTAMP'2024-03-09 10:00:00+00:00' AS ts, 33 AS v",
                          strategy="patch", time_zone="Asia/Kolkata")
    patched = run(spark, settings, patch)
    assert patched.status == "published" and current_version(spark, f"{db}.events") == version + 1
    expected[2] = (3, rows[2][1], 33)
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, TIMED),
                       ignore_row_order=True, ignore_nullable=True)
    assert detail() == ["ts"]


def test_the_fence_refuses_a_commit_whose_file_overlaps_the_range_and_passes_one_outside_it(spark, settings, db,
                                                                                           tmp_path):
    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import FenceError
    from backfill_lib.runner import Runner, prepare
    from rich.console import Console

    write_by_day(spark, [(1, D8, 1), (3, D9, 3), (5, D10, 5)], DATED, f"{db}.events", "d")
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "d"},
                            f"SELECT id, d, v + 1 AS v FROM {db}.events VERSION AS OF 2 "
                            "WHERE d >= :range_start AND d < :range_end")
    quiet = lambda: Runner(spark, settings, Console(file=open("/dev/null", "w")))  # noqa: E731
    plan, state = prepare(spark, settings, request)
    spark.createDataFrame([(7, D11, 7)], DATED).write.format("delta").mode("append").saveAsTable(f"{db}.events")
    assert quiet().run(plan, state).status == "published"  # a file of 2024-03-11 only: outside the range

    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "d"},
                            f"SELECT id, d, v + 2 AS v FROM {db}.events VERSION AS OF 2 "
                            "WHERE d >= :range_start AND d < :range_end")
    plan, state = prepare(spark, settings, request)
    spark.createDataFrame([(8, D8, 8), (9, D10, 9)], DATED).coalesce(1).write.format("delta").mode("append") \
        .saveAsTable(f"{db}.events")  # one file spanning 2024-03-08 .. 10: it may hold 2024-03-09
    before = current_version(spark, f"{db}.events")
    with pytest.raises(FenceError, match="changed in range since the plan read version 4 .now version 5.: "
                                         "partitions 2024-03-09"):
        quiet().run(plan, state)
    assert current_version(spark, f"{db}.events") == before


def test_rebuild_of_a_clustered_unpartitioned_table_keeps_its_clustering(spark, settings, db, tmp_path):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version

    rows = clustered_events(spark, db)
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "ts"},
                            f"SELECT id, ts, v + 100 AS v FROM {db}.events VERSION AS OF 4 "
                            "UNION ALL SELECT 9, CAST(NULL AS TIMESTAMP), 109", strategy="rebuild",
                            time_zone="Asia/Kolkata")
    import yaml
    fields = yaml.safe_load(request.read_text())
    del fields["range"]
    request.write_text(yaml.safe_dump(fields))
    result = run(spark, settings, request)
    assert result.status == "published" and current_version(spark, f"{db}.events") == 5
    assert [p.key for p in result.plan.partitions] == ["2024-03-08", "2024-03-09", "2024-03-10"]
    # a row whose range value is NULL belongs to no partition; a rebuild keeps it (the post-publish check too)
    assert_df_equality(spark.table(f"{db}.events"),
                       spark.createDataFrame([(i, ts, v + 100) for i, ts, v in rows] + [(9, None, 109)], TIMED),
                       ignore_row_order=True, ignore_nullable=True)
    detail = spark.sql(f"DESCRIBE DETAIL {db}.events").first()
    assert (detail["clusteringColumns"], detail["partitionColumns"]) == (["ts"], [])
