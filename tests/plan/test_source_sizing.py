"""The plan's size of its source input, read by Delta Kernel in the driver (issue 22 item 3), against what Spark's
``DataFrame.inputFiles()`` lists for the same query: the same files and bytes wherever a filter translates, more
files (never fewer) where one does not, Spark's own answer for a source that is not Delta."""

from __future__ import annotations

import json
import time
from datetime import date, datetime, timezone
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from backfill_lib.adapters import kernel_log, kernel_scan
from backfill_lib.adapters.kernel_scan import kernel_input_files
from backfill_lib.plan.model import SourceInput
from backfill_lib.plan.source_query import source_input
from backfill_lib.runner import prepare
from tests.fixtures import D8, D10, FULL_SOURCE, TARGET_ROWS, events_request, make_events

SCHEMA = "id INT, d DATE, region STRING, v INT"
# one file a row: each file's statistics hold one value of v
ROWS = [(1, date(2024, 3, 9), "a", 10), (2, date(2024, 3, 9), "x", 20), (3, date(2024, 3, 10), "x", 30),
        (4, date(2024, 3, 10), None, 40), (5, date(2024, 3, 11), "a", 50), (6, None, "x", 60)]


def _spark_input(spark, query: str) -> tuple[int, int]:
    """Files and bytes as :func:`source_input` finds them with ``inputFiles()`` and the file system."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(kernel_scan, "kernel_input_files", lambda spark, df: None)
        found = source_input(spark, spark.sql(query))
    return found.files, found.bytes


def _kernel_input(spark, query: str) -> tuple[int, int]:
    found = kernel_input_files(spark, spark.sql(query))
    assert found is not None
    return found


@pytest.fixture
def events(spark, db):
    """Partitioned by a DATE and a STRING column (a NULL in each), column mapping by name with a renamed column,
    one file a row, and a commit after version 1."""
    name = f"{db}.events"
    spark.sql(f"CREATE TABLE {name} (id INT, d DATE, region STRING, w INT) USING delta PARTITIONED BY (d, region) "
              "TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', "
              "'delta.minWriterVersion' = '5')")
    spark.sql(f"ALTER TABLE {name} RENAME COLUMN w TO v")  # logical v, physical name of w: Kernel reads by logical
    spark.createDataFrame(ROWS[:4], SCHEMA).repartition(4, "id").writeTo(name).append()  # version 2
    spark.createDataFrame(ROWS[4:], SCHEMA).repartition(2, "id").writeTo(name).append()  # version 3
    return name


def test_kernel_sizes_the_files_spark_lists(spark, events):
    cases = {
        f"SELECT * FROM {events} WHERE d >= DATE'2024-03-10' AND d < DATE'2024-03-11'": 2,
        f"SELECT * FROM {events} WHERE region IN ('a', 'x') AND d = DATE'2024-03-09'": 2,
        f"SELECT * FROM {events} WHERE NOT (region = 'x') OR region IS NULL": 3,
        f"SELECT * FROM {events} WHERE d IS NULL": 1,
        f"SELECT * FROM {events} WHERE v >= 45": 2,  # data skipping by the files' statistics
        f"SELECT id FROM {events} WHERE v < 25 AND id > 0 GROUP BY id": 2,
        f"SELECT * FROM {events} VERSION AS OF 2 WHERE region = 'x'": 2,  # at the pinned version
        f"SELECT a.id FROM {events} a JOIN {events} b ON a.id = b.id "
        f"WHERE a.d = DATE'2024-03-09' AND b.region = 'x'": 4,  # two relations: 2 files + 3, one in both
        f"SELECT * FROM {events} WHERE d < DATE'2024-01-01'": 0,
    }
    for query, files in cases.items():
        assert _kernel_input(spark, query) == _spark_input(spark, query), query
        assert _kernel_input(spark, query)[0] == files, query


def test_a_filter_kernel_cannot_take_keeps_more_files_never_fewer(spark, events):
    query = f"SELECT * FROM {events} WHERE upper(region) = 'A' AND d >= DATE'2024-03-10'"
    # Spark prunes by both; Kernel by the date and the `region IS NOT NULL` Spark infers from upper(region) = 'A'
    # (ids 3 and 5), not by upper(region) itself
    assert _spark_input(spark, query)[0] == 1
    assert _kernel_input(spark, query)[0] == 2


@pytest.mark.parametrize("zone", ["America/New_York", "UTC", "Asia/Kolkata"])
def test_timestamp_partitions_are_pruned_as_spark_prunes_them_in_any_session_zone(spark, db, zone):
    name = f"{db}.hourly"
    hours = [datetime(2024, 3, 10, h, tzinfo=timezone.utc) for h in range(4, 10)]  # 23:00 to 05:00 in New York,
    # whose clocks skip 02:00 that night; the partition values are written in New York's time
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        spark.createDataFrame([(i, h) for i, h in enumerate(hours)], "id INT, hour TIMESTAMP") \
            .repartition(6, "id").write.format("delta").partitionBy("hour").saveAsTable(name)
        spark.conf.set("spark.sql.session.timeZone", zone)
        query = (f"SELECT * FROM {name} WHERE hour >= TIMESTAMP'2024-03-10 06:00:00Z' "
                 f"AND hour < TIMESTAMP'2024-03-10 09:00:00Z'")
        assert _kernel_input(spark, query) == _spark_input(spark, query)
        assert _kernel_input(spark, query)[0] == 3  # 06:00, 07:00 and 08:00 UTC
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)


def test_a_source_that_is_not_delta_is_sized_by_spark(spark, db, tmp_path):
    name = f"{db}.plain"
    spark.createDataFrame(ROWS[:3], SCHEMA).coalesce(1).write.format("parquet").saveAsTable(name)
    spark.createDataFrame(ROWS[3:], SCHEMA).coalesce(1).write.format("parquet").mode("append").saveAsTable(name)
    query = f"SELECT * FROM {name} WHERE v > 0"
    assert kernel_input_files(spark, spark.sql(query)) is None
    assert source_input(spark, spark.sql(query)) == SourceInput(*_spark_input(spark, query))
    assert _spark_input(spark, query)[0] == 2


def _job_ids(spark) -> dict[int, str]:
    """Every Spark job the status store holds: ID and description."""
    jobs, found = spark.sparkContext._jsc.sc().statusStore().jobsList(None).iterator(), {}
    while jobs.hasNext():
        job = jobs.next()
        found[job.jobId()] = job.description().getOrElse(None) if job.description().isDefined() else ""
    return found


def test_planning_a_recompute_from_delta_tables_runs_no_spark_job(spark, settings, db, tmp_path):
    make_events(spark, db, FULL_SOURCE)
    request = events_request(tmp_path, db, start=D8, end=D10)
    before = max(_job_ids(spark), default=-1)

    plan, _ = prepare(spark, settings, request, run_id="no_job_1")

    # a marker job, then wait for the store to show it: the listener bus delivers jobs in order, so any job the
    # planning ran is in the store by then
    spark.sparkContext.setJobDescription("no-job marker")
    try:
        spark.sparkContext.parallelize([1], 1).count()
    finally:
        spark.sparkContext.setJobDescription(None)
    for _ in range(100):
        jobs = _job_ids(spark)
        if "no-job marker" in jobs.values():
            break
        time.sleep(0.1)
    assert {i: d for i, d in jobs.items() if i > before} == {max(jobs): "no-job marker"}
    source = f"SELECT * FROM {db}.events_src WHERE dt >= DATE'2024-03-08' AND dt < DATE'2024-03-11'"
    assert (plan.source_input.files, plan.source_input.bytes) == _spark_input(spark, source)
    assert plan.source_input.files >= 3 and len(plan.partitions) == 3
    assert sum(p.current.rows for p in plan.partitions) == sum(1 for _, d, _ in TARGET_ROWS if D8 <= d <= D10)


def test_a_filter_above_a_nondeterministic_projection_prunes_nothing(spark, events):
    # Spark keeps such a filter above the projection (pushing it down would change the values rand() and the
    # ids draw), so Delta lists every file; Kernel must not prune by it either
    spark.udf.register("nd_id", F.udf(lambda i: i, "INT").asNondeterministic())
    for projection in ("rand() AS r", "monotonically_increasing_id() AS m", "nd_id(id) AS n"):
        query = f"SELECT * FROM (SELECT *, {projection} FROM {events}) WHERE d = DATE'2024-03-09'"
        assert _kernel_input(spark, query) == _spark_input(spark, query), query
        assert _kernel_input(spark, query)[0] == 6, query


def test_only_the_deterministic_filters_below_a_nondeterministic_one_prune(spark, events):
    # (rand() < 2 would do: Spark's optimizer knows rand() < 1 and drops such a filter)
    cases = {
        # d = ... stays above the random filter, and Delta lists every file
        f"SELECT * FROM (SELECT * FROM {events} WHERE rand(7) < 0.5) WHERE d = DATE'2024-03-09'": (6, 6),
        # below the random filter: region = 'x' (ids 2, 3 and 6)
        f"SELECT * FROM (SELECT * FROM (SELECT * FROM {events} WHERE region = 'x') WHERE rand(7) < 0.5) "
        f"WHERE d = DATE'2024-03-09'": (3, 3),
        # one filter holding both: Spark prunes by d, Kernel by nothing of a nondeterministic condition
        f"SELECT * FROM {events} WHERE d = DATE'2024-03-09' AND rand(7) < 0.5": (6, 2),
    }
    found = {query: (_kernel_input(spark, query)[0], _spark_input(spark, query)[0]) for query in cases}
    assert found == cases


def test_an_in_list_spark_turns_into_a_set_prunes_as_spark_does(spark, events):
    days = [date(2024, 3, 1 + i) for i in range(9)] + [date(2024, 3, 11), date(2024, 4, 1), date(2024, 4, 2)]
    assert len(days) > int(spark.conf.get("spark.sql.optimizer.inSetConversionThreshold"))  # an InSet, not an In
    query = f"SELECT * FROM {events} WHERE d IN ({', '.join(f'DATE{str(d)!r}' for d in days)})"
    assert _kernel_input(spark, query) == _spark_input(spark, query)
    assert _kernel_input(spark, query)[0] == 3  # 2024-03-09's 2 files, 2024-03-11's 1


def test_above_the_file_limit_kernel_gives_up_and_spark_sizes_the_input(spark, events, monkeypatch):
    query = f"SELECT * FROM {events} WHERE id > 0"
    monkeypatch.setattr(kernel_log, "MAX_FILES", 6)
    assert kernel_input_files(spark, spark.sql(query))[0] == 6
    monkeypatch.setattr(kernel_log, "MAX_FILES", 5)
    assert kernel_input_files(spark, spark.sql(query)) is None
    assert source_input(spark, spark.sql(query)) == SourceInput(*_spark_input(spark, query))


def _log_partition_values(spark, name: str, column: str) -> list[str]:
    """The raw values of ``column`` in the ``add`` actions of ``name``'s commit files."""
    location = Path(spark.sql(f"DESCRIBE DETAIL {name}").first()["location"].removeprefix("file:"))
    return sorted(json.loads(line)["add"]["partitionValues"][column]
                  for commit in location.glob("_delta_log/*.json")
                  for line in commit.read_text().splitlines() if '"add"' in line)


def test_timestamp_partition_values_without_a_zone_keep_more_files_never_fewer(spark, db):
    name = f"{db}.local_hours"
    hours = [datetime(2024, 3, 10, h, tzinfo=timezone.utc) for h in range(4, 10)]  # New York skips 02:00
    previous = spark.conf.get("spark.sql.session.timeZone")
    utc_values = "spark.databricks.delta.write.utcTimestampPartitionValues"
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    spark.conf.set(utc_values, "false")
    try:
        spark.createDataFrame([(i, h) for i, h in enumerate(hours)], "id INT, hour TIMESTAMP") \
            .repartition(6, "id").write.format("delta").partitionBy("hour").saveAsTable(name)
        spark.conf.unset(utc_values)
        assert _log_partition_values(spark, name, "hour")[:2] == ["2024-03-09 23:00:00", "2024-03-10 00:00:00"]
        query = (f"SELECT * FROM {name} WHERE hour >= TIMESTAMP'2024-03-10 06:00:00Z' "
                 f"AND hour < TIMESTAMP'2024-03-10 09:00:00Z'")
        assert _spark_input(spark, query)[0] == 3  # 01:00, 03:00 and 04:00 in New York
        assert _kernel_input(spark, query)[0] == 6  # the comparison on `hour` left out
    finally:
        spark.conf.unset(utc_values)
        spark.conf.set("spark.sql.session.timeZone", previous)


def test_dates_before_the_gregorian_calendar_keep_more_files_never_fewer(spark, db):
    name = f"{db}.old_days"
    days = [date(1499, 12, 28), date(1500, 1, 5), date(1500, 1, 15), date(1600, 1, 1)]
    rows = [(i, d, d, datetime(d.year, d.month, d.day, tzinfo=timezone.utc)) for i, d in enumerate(days)]
    spark.createDataFrame(rows, "id INT, d DATE, e DATE, t TIMESTAMP").repartition(4, "id") \
        .write.format("delta").partitionBy("d").saveAsTable(name)
    cases = {}
    for col in ("d", "e"):
        cases.update({f"SELECT * FROM {name} WHERE {col} >= DATE'1500-01-01'": 3,
                      f"SELECT * FROM {name} WHERE {col} < DATE'1500-01-10'": 2,
                      f"SELECT * FROM {name} WHERE {col} = DATE'1500-01-05'": 1,
                      f"SELECT * FROM {name} WHERE {col} > DATE'1500-01-14'": 2,
                      f"SELECT * FROM {name} WHERE {col} <= DATE'1499-12-28'": 1})
    cases.update({f"SELECT * FROM {name} WHERE t >= TIMESTAMP'1500-01-01 00:00:00Z'": 3,
                  f"SELECT * FROM {name} WHERE t < TIMESTAMP'1500-01-10 00:00:00Z'": 2,
                  f"SELECT * FROM {name} WHERE t > TIMESTAMP'1500-01-14 00:00:00Z'": 2})
    # Kernel may read such a date in another calendar: no pruning by it
    found = {query: (_kernel_input(spark, query)[0], _spark_input(spark, query)[0]) for query in cases}
    assert found == {query: (4, files) for query, files in cases.items()}
    query = f"SELECT * FROM {name} WHERE d >= DATE'1583-01-01' AND t >= TIMESTAMP'1583-01-01 00:00:00Z'"
    assert _kernel_input(spark, query) == _spark_input(spark, query)  # from 1583 on: pruned as Spark prunes
    assert _kernel_input(spark, query)[0] == 1
