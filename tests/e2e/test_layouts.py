"""Issue 18, first items: string date partitions (``target.partition_format``), the range's column at any
position of the partition spec, ``target.where``, and what ``backfill plan`` says of the layout.

The pure tests (no Spark) come first; the Spark tests run real backfills on tiny inline Delta tables."""

from __future__ import annotations

import dataclasses
import json
from datetime import date, datetime, timezone

import pytest
from rich.console import Console

from backfill_lib.core.errors import IntakeError, PartitionError, RequestError
from backfill_lib.core.partition_format import PartitionFormat
from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.partitions import (
    Grain,
    RowFilter,
    enumerate_partitions,
    half_open,
    partition_of_key,
)
from backfill_lib.core.predicates import partitions_predicate
from backfill_lib.core.table_state import Column, PartitionStats, TableState
from backfill_lib.intake.request import BackfillRequest, load_request
from backfill_lib.plan.builder import build_plan
from backfill_lib.plan.explain import explain
from backfill_lib.plan.model import plan_from_summary
from backfill_lib.plan.kinds import kind_for

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
UTC = timezone.utc


# --- pure: the pattern --------------------------------------------------------------------------------------

@pytest.mark.parametrize("pattern, grain, start, zone, text", [
    ("yyyy-MM-dd", "day", date(2024, 3, 9), "UTC", "2024-03-09"),
    ("yyyyMMdd", "day", date(2024, 3, 9), "UTC", "20240309"),
    ("yyyy/M/d", "day", date(2024, 3, 9), "UTC", "2024/3/9"),
    ("'dt='yyyy-MM-dd", "day", date(2024, 3, 9), "UTC", "dt=2024-03-09"),
    ("yyyy-MM", "month", date(2024, 3, 1), "UTC", "2024-03"),
    ("yyyy-MM-dd", "month", date(2024, 3, 1), "UTC", "2024-03-01"),
    ("yyyy-MM-dd-HH", "hour", datetime(2024, 3, 10, 7, tzinfo=UTC), "America/New_York", "2024-03-10-03"),
    ("yyyy-MM-dd HH:mm:ss", "hour", datetime(2024, 3, 10, 7, tzinfo=UTC), "UTC", "2024-03-10 07:00:00"),
    ("yyyy-MM-dd'T'HH:mmXXX", "hour", datetime(2024, 11, 3, 6, tzinfo=UTC), "America/New_York",
     "2024-11-03T01:00-05:00"),
    ("yyyy-MM-dd'T'HHXXX", "hour", datetime(2024, 3, 10, 7, tzinfo=UTC), "UTC", "2024-03-10T07Z"),
    ("yyyy-MM-dd'T'HHxx", "hour", datetime(2024, 3, 10, 7, tzinfo=UTC), "UTC", "2024-03-10T07+0000"),
    ("yyyyMMddHHX", "hour", datetime(2024, 3, 10, 6, 30, tzinfo=UTC), "Asia/Kolkata", "2024031012+0530"),
    ("yyyy-MM-dd HHZ", "hour", datetime(2024, 3, 10, 7, tzinfo=UTC), "Europe/Paris", "2024-03-10 08+0100"),
])
def test_a_pattern_renders_a_partition_start_as_spark_does_and_parses_it_back(pattern, grain, start, zone, text):
    fmt = PartitionFormat.of(pattern)
    assert fmt.render(start, grain, zone) == text
    assert fmt.parse(text, grain, zone) == start


def test_a_value_must_be_exactly_in_the_pattern_and_a_loose_read_says_which_partition_it_meant():
    fmt = PartitionFormat.of("yyyy-MM-dd")
    for value in ("2024-3-9", "2024/03/09", "2024-03-09 ", "2024-02-30", "x"):
        with pytest.raises(PartitionError, match=f"partition value '{value}' is not a yyyy-MM-dd value"):
            fmt.parse(value, "day", "UTC")
    assert [fmt.loose_start(v, "day", "UTC") for v in ("2024-3-9", "2024/03/09", "20240309", "x", "2024-02-30")] == [
        date(2024, 3, 9), date(2024, 3, 9), date(2024, 3, 9), None, None]
    month = PartitionFormat.of("yyyy-MM-dd")
    with pytest.raises(PartitionError, match="'2024-03-05' is not a yyyy-MM-dd value"):
        month.parse("2024-03-05", "month", "UTC")  # not a month's first day
    hour = PartitionFormat.of("yyyy-MM-dd'T'HH:mmXXX")
    with pytest.raises(PartitionError, match="'2024-11-03T01:00\\+00:00' is not"):
        hour.parse("2024-11-03T01:00+00:00", "hour", "America/New_York")  # the zone's offset then was -04:00
    with pytest.raises(PartitionError, match="'2024-03-10T02:00-05:00' is not"):
        hour.parse("2024-03-10T02:00-05:00", "hour", "America/New_York")  # 02:00 did not exist that night


@pytest.mark.parametrize("pattern, grain, message", [
    ("yyyy-MM-ddTHH", "hour", "pattern letter 'T' is not supported for partitions"),
    ("yy-MM-dd", "day", "'yy' is not supported (use yyyy)"),
    ("yyyy-MMM-dd", "day", "'MMM' is not supported (use M or MM)"),
    ("yyyy-MM-dd'", "day", "has an unclosed quote"),
    ("yyyy-MM", "day", "'yyyy-MM' has no day (grain day needs year, month, day)"),
    ("yyyy-MM-dd HH", "day", "'yyyy-MM-dd HH' renders hour, finer than or beside grain day"),
    ("yyyy-MM-dd", "hour", "'yyyy-MM-dd' has no hour (grain hour needs year, month, day, hour)"),
    ("yyyy-MM-dd-dd", "day", "'yyyy-MM-dd-dd' renders the day twice"),
])
def test_a_bad_pattern_is_refused_when_the_request_is_read(tmp_path, pattern, grain, message):
    path = write_layout_request(tmp_path, {"table": "db.events", "partition_column": "dt", "grain": grain,
                                           "partition_format": pattern})
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert f"field 'target.partition_format': partition_format '{pattern}'" in str(err.value)
    assert message in str(err.value)


def test_a_where_is_refused_for_a_rebuild_and_when_blank(tmp_path):
    target = {"table": "db.events", "partition_column": "dt", "where": "region = 'EU'"}
    with pytest.raises(RequestError, match="field 'target.where': a rebuild re-creates the whole table; where "
                                           "applies to recompute and patch"):
        load_request(write_layout_request(tmp_path, target, strategy="rebuild"))
    with pytest.raises(RequestError, match="field 'target.where': must not be blank"):
        load_request(write_layout_request(tmp_path, {**target, "where": "  "}))


# --- pure: keys and predicates ------------------------------------------------------------------------------

def test_string_partitions_are_keyed_by_their_strings_and_selected_by_an_in_list():
    start, end = half_open(date(2024, 3, 8), date(2024, 3, 10), Grain.DAY, "UTC")
    parts = enumerate_partitions(start, end, Grain.DAY, "UTC", "yyyyMMdd")
    assert [p.key for p in parts] == ["20240308", "20240309", "20240310"]
    assert partition_of_key("20240309", Grain.DAY, "UTC", "yyyyMMdd") == parts[1]
    assert partitions_predicate("dt", parts, formatted=True) == "(`dt` IN ('20240308', '20240309', '20240310'))"
    assert partitions_predicate("dt", parts[1:2], "t", formatted=True) == "(t.`dt` = '20240309')"
    assert partitions_predicate("dt", parts, formatted=True, shown=1) == "(`dt` IN ('20240308', ... 1 more ..., '20240310'))"
    quoted = enumerate_partitions(start, start + (end - start) / 3, Grain.DAY, "UTC", "''yyyy-MM-dd''")
    assert partitions_predicate("dt", quoted, formatted=True) == "(`dt` = '\\'2024-03-08\\'')"


def test_partition_keys_of_a_string_column_pass_its_values_and_render_a_typed_source_column_in_the_format():
    keys = PartitionKeys("dt", Grain.DAY, "UTC", "yyyyMMdd")
    assert keys.holds_keys and keys.key("20240309") == "20240309"
    assert keys.rekey({"20240309": 3, None: 1}) == {"20240309": 3, None: 1}
    assert keys.of("s1") == PartitionKeys("s1", Grain.DAY, "UTC", "yyyyMMdd")  # an alias of the same column
    source = keys.of_source("d")  # a rule's DATE column, keyed as the string target's plan keys
    assert (source.column, source.holds_keys) == ("d", False)
    assert source.key("2024-03-09") == "20240309"
    assert source.key_of_value(date(2024, 3, 9)) == "20240309"
    assert source.rekey({"2024-03-09": 3}) == {"20240309": 3}
    hours = PartitionKeys("ts", Grain.HOUR, "America/New_York", "yyyy-MM-dd-HH", string_column=False)
    assert hours.key("2024-03-10T07:00:00Z") == "2024-03-10-03"
    assert hours.key_of_value(datetime(2024, 3, 10, 7, tzinfo=UTC)) == "2024-03-10-03"
    plain = PartitionKeys("dt", Grain.DAY, "UTC")
    assert (plain.holds_keys, plain.key("2024-03-09"), plain.of_source("d").key("2024-03-09")) == (False, "2024-03-09", "2024-03-09")


STRING_COLUMNS = (Column("id", "int"), Column("dt", "string"), Column("v", "int"))
REGION_COLUMNS = (Column("id", "int"), Column("region", "string"), Column("dt", "date"), Column("v", "int"))
EU = RowFilter("region = 'EU'", "(region = 'EU')", "(t.region = 'EU')", ("region",))


def layout_request(target: dict, start="2024-03-09", end="2024-03-09", strategy="recompute", **extra) -> BackfillRequest:
    return BackfillRequest.model_validate({
        "name": "layout", "owner": "ana@example.com", "reason": "TEST-18", "target": target,
        "range": {"start": start, "end": end}, "time_zone": extra.pop("time_zone", "UTC"), "strategy": strategy,
        "source": {"sql": "s.sql"}, "keys": ["id"], **extra})


def table(columns, partition_columns, partitions, name="db.events") -> TableState:
    return TableState(name, "file:/tmp/events", 4, columns, partition_columns, partitions)


def plan_of(request, state, where=None):
    return build_plan(request, state, request_path="r.yml", staging_schema="stg", batch_size=None, now=NOW,
                      run_id="bf_layout", where=where)


def test_a_string_plan_takes_its_cost_from_the_log_values_and_refuses_values_of_the_range_not_in_the_format():
    target = {"table": "db.events", "partition_column": "dt", "partition_format": "yyyyMMdd"}
    log = {"20240308": PartitionStats(1, 100, 2, "a"), "20240309": PartitionStats(2, 300, 5, "b"),
           "20240311": PartitionStats(1, 50, 1, "c")}
    plan = plan_of(layout_request(target, "2024-03-08", "2024-03-10"), table(STRING_COLUMNS, ("dt",), log))
    assert [(p.key, p.current.rows) for p in plan.partitions] == [("20240308", 2), ("20240309", 5), ("20240310", 0)]
    assert plan.total == PartitionStats(3, 400, 7)
    assert plan.predicate() == "(`dt` IN ('20240308', '20240309', '20240310'))"
    assert plan.partition_keys == PartitionKeys("dt", Grain.DAY, "UTC", "yyyyMMdd")

    odd = {**log, "2024039": PartitionStats(1, 10, 1, "d"), "2024-03-10": PartitionStats(1, 10, 1, "e"),
           "unknown": PartitionStats(1, 10, 1, "f"), "20240301": PartitionStats(1, 10, 1, "g")}
    with pytest.raises(IntakeError) as err:
        plan_of(layout_request(target, "2024-03-08", "2024-03-10"), table(STRING_COLUMNS, ("dt",), odd))
    assert str(err.value) == (
        "table db.events column dt holds partition values in the range that do not match target.partition_format "
        "yyyyMMdd: '2024-03-10'; the run would leave their rows beside the recomputed ones (rewrite them in the "
        "format first)")


def test_a_string_or_typed_column_must_fit_the_format():
    with pytest.raises(IntakeError, match="column dt is string, grain day needs date \\(a string column needs "
                                          "target.partition_format, e.g. yyyy-MM-dd\\)"):
        plan_of(layout_request({"table": "db.events", "partition_column": "dt"}), table(STRING_COLUMNS, ("dt",), {}))
    with pytest.raises(IntakeError, match="column dt is date: target.partition_format applies to a string column"):
        plan_of(layout_request({"table": "db.events", "partition_column": "dt", "partition_format": "yyyy-MM-dd"}),
                table(REGION_COLUMNS, ("region", "dt"), {}))


def test_hour_strings_across_daylight_saving_changes():
    target = {"table": "db.events", "partition_column": "h", "grain": "hour", "partition_format": "yyyy-MM-dd-HH"}
    columns = (Column("id", "int"), Column("h", "string"))
    spring = plan_of(layout_request(target, "2024-03-10", "2024-03-10", time_zone="America/New_York"),
                     table(columns, ("h",), {"2024-03-10-03": PartitionStats(1, 10, 4, "x")}))
    keys = [p.key for p in spring.partitions]
    assert len(keys) == 23 and keys[:4] == ["2024-03-10-00", "2024-03-10-01", "2024-03-10-03", "2024-03-10-04"]
    assert spring.partitions[2].current.rows == 4
    assert spring.write_time_zone == "America/New_York"  # strings need no UTC writes
    with pytest.raises(IntakeError) as err:  # the fall-back repeats 01:00: one string for two hours
        plan_of(layout_request(target, "2024-11-03", "2024-11-03", time_zone="America/New_York"),
                table(columns, ("h",), {}))
    assert str(err.value) == (
        "field 'target.partition_format': yyyy-MM-dd-HH renders the hours 2024-11-03T05:00+00:00 and "
        "2024-11-03T06:00+00:00 (UTC) as the same value '2024-11-03-01' in America/New_York (a daylight-saving "
        "fall-back): their rows cannot be told apart in h; use a format with an offset (e.g. "
        "yyyy-MM-dd'T'HH:mmXXX), time_zone UTC if the column holds UTC hours, or a range that does not cross the "
        "fall-back")
    offset = {**target, "partition_format": "yyyy-MM-dd'T'HH:mmXXX"}
    fall = plan_of(layout_request(offset, "2024-11-03", "2024-11-03", time_zone="America/New_York"),
                   table(columns, ("h",), {}))
    assert [p.key for p in fall.partitions][1:3] == ["2024-11-03T01:00-04:00", "2024-11-03T01:00-05:00"]
    assert len(fall.partitions) == 25
    utc = plan_of(layout_request(target, "2024-11-03", "2024-11-03"), table(columns, ("h",), {}))
    assert len({p.key for p in utc.partitions}) == 24


def test_the_range_column_at_any_position_and_a_where_on_the_other_partition_columns():
    target = {"table": "db.events", "partition_column": "dt", "where": "region = 'EU'"}
    log = {"2024-03-09": PartitionStats(1, 100, 2, "eu9")}  # read within the where: EU's files only
    state = table(REGION_COLUMNS, ("region", "dt"), log)
    plan = plan_of(layout_request(target), state, EU)
    assert [(p.key, p.current.rows) for p in plan.partitions] == [("2024-03-09", 2)]
    assert plan.predicate() == "(`dt` >= DATE'2024-03-09' AND `dt` < DATE'2024-03-10') AND ((region = 'EU'))"
    assert plan.partition_predicate() == "(`dt` >= DATE'2024-03-09' AND `dt` < DATE'2024-03-10')"
    assert plan.predicate(qualifier="t") == (
        "(t.`dt` >= DATE'2024-03-09' AND t.`dt` < DATE'2024-03-10') AND ((t.region = 'EU'))")
    assert plan.partition_spec == ("region", "dt")
    assert kind_for(plan.strategy).publish_statement(plan) == (
        "replaceWhere on db.events: (`dt` >= DATE'2024-03-09' AND `dt` < DATE'2024-03-10') AND ((region = 'EU'))")
    patch = plan_of(layout_request(target, strategy="patch"), state, EU)
    assert kind_for(patch.strategy).publish_statement(patch) == (
        "MERGE INTO db.events t USING staged s ON t.`id` <=> s.`id` AND (t.`dt` >= DATE'2024-03-09' AND "
        "t.`dt` < DATE'2024-03-10') AND ((t.region = 'EU'))")

    again = plan_from_summary(json.loads(json.dumps(plan.summary())))
    assert (again.where, again.partition_spec, again.predicate()) == (EU, ("region", "dt"), plan.predicate())

    with pytest.raises(IntakeError, match="field 'target.where': 'region = 'EU'' was not checked against table"):
        plan_of(layout_request(target), state)  # a where no analyzer has seen is never run
    on_data = RowFilter("v > 1", "(v > 1)", "(t.v > 1)", ("v",))
    with pytest.raises(IntakeError, match="'v > 1' reads v, which is not a partition column of table db.events "
                                          "\\(partition columns: region, dt\\); where narrows by the other"):
        plan_of(layout_request({**target, "where": "v > 1"}), state, on_data)
    on_range = RowFilter("dt > '2024-01-01'", "(dt > DATE'2024-01-01')", "(t.dt > DATE'2024-01-01')", ("dt",))
    with pytest.raises(IntakeError, match="reads dt, the column the range selects; where narrows by the other "
                                          "partition columns \\(region\\)"):
        plan_of(layout_request({**target, "where": "dt > '2024-01-01'"}), state, on_range)
    # dt beside the partition spec: a range on a data column (tests/e2e/test_data_column_layouts.py)
    on_column = plan_of(layout_request({"table": "db.events", "partition_column": "dt"}), dataclasses.replace(
        state, partition_columns=("region",), files=()))
    assert (on_column.range_in_data, on_column.partition_spec) == (True, ("region",))


def test_backfill_plan_says_which_layout_it_found_and_the_statement_that_publishes():
    target = {"table": "db.events", "partition_column": "dt", "partition_format": "yyyy-MM-dd",
              "where": "region = 'EU'"}
    columns = (Column("id", "int"), Column("region", "string"), Column("dt", "string"), Column("v", "int"))
    state = table(columns, ("region", "dt"), {"2024-03-02": PartitionStats(1, 2048, 3, "x")})
    plan = plan_of(layout_request(target, "2024-03-01", "2024-03-31"), state, EU)
    console = Console(record=True, width=400)
    console.print(explain(plan))
    lines = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in console.export_text().splitlines()
             if "  " in line and not line.startswith(("│", "┃", "┏", "┡", "└"))}
    assert lines["layout"] == ("partitioned by (region, dt); the range is on dt (string in partition_format "
                               "yyyy-MM-dd, grain day), column 2 of 2; each partition's cost sums its files over region")
    assert lines["where"] == ("region = 'EU' (analysed: (region = 'EU')); only the range's rows where it holds are "
                              "staged, validated and published, the others are not touched, and a source row outside "
                              "it fails the run")
    assert lines["publish statement"] == (
        "replaceWhere on db.events: (`dt` IN ('2024-03-01', '2024-03-02', '2024-03-03', ... 25 more ..., "
        "'2024-03-29', '2024-03-30', '2024-03-31')) AND ((region = 'EU'))")
    assert lines["current data in range"] == "1 files, 2.0 KiB, 3 rows (from the Delta log)"


def write_layout_request(tmp_path, target: dict, strategy: str = "recompute", **extra):
    from tests.conftest import write_request

    sql = tmp_path / "layout.sql"
    if not sql.exists():
        sql.write_text("SELECT 1 AS id")
    fields = {"owner": "ana@example.com", "reason": "TEST-18: layouts", "target": target,
              "range": {"start": "2024-03-09", "end": "2024-03-09"}, "time_zone": "UTC", "strategy": strategy,
              "source": {"sql": str(sql)}, "keys": ["id"], **extra}
    return write_request(tmp_path / "layout.yml", **fields)


# --- Spark: real backfills on tiny Delta tables -------------------------------------------------------------

from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import DateType, IntegerType, StringType, StructField, StructType, TimestampType  # noqa: E402

from tests.conftest import write_request  # noqa: E402

D8, D9, D10 = date(2024, 3, 8), date(2024, 3, 9), date(2024, 3, 10)

STRING_SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("dt", StringType(), True),
                            StructField("v", IntegerType(), True)])
DATED_SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("d", DateType(), True),
                           StructField("v", IntegerType(), True)])
REGION_SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("region", StringType(), True),
                            StructField("dt", DateType(), True), StructField("v", IntegerType(), True)])


def run(spark, settings, request):
    from backfill_lib.runner import Runner, prepare

    plan, state = prepare(spark, settings, request)
    return Runner(spark, settings, Console(file=open("/dev/null", "w"))).run(plan, state)


def spark_request(tmp_path, target: dict, sql: str, start: date = D9, end: date = D9, **extra):
    sql_file = tmp_path / "layout.sql"
    sql_file.write_text(sql)
    fields = {"owner": "ana@example.com", "reason": "TEST-18: layouts", "target": target,
              "range": {"start": start.isoformat(), "end": end.isoformat()}, "time_zone": "UTC",
              "strategy": "recompute", "source": {"sql": str(sql_file)}, "keys": ["id"], **extra}
    return write_request(tmp_path / "layout.yml", **fields)


def files_of(spark, table: str, where: str) -> dict[int, str]:
    """The data file each row of ``table`` within ``where`` is read from, by ``id``."""
    rows = spark.table(table).where(where).select("id", F.input_file_name().alias("f")).collect()
    return {r["id"]: r["f"] for r in rows}


def log_files(spark, table: str) -> set[tuple[str, str]]:
    """Every ``add`` action of ``table``'s latest snapshot as (sorted partition values, path)."""
    from backfill_lib.adapters.delta_log import add_files, latest_snapshot

    rows = add_files(spark, latest_snapshot(spark, table)).select("partitionValues", "path").collect()
    return {(json.dumps(dict(sorted(r["partitionValues"].items()))), r["path"]) for r in rows}


def staging_tables(spark, settings, db: str) -> list[str]:
    """The run staging tables of ``db.events`` (none when a batch failed before its first write, nor for pinned
    runs, which may leave no staging schema either)."""
    if not spark.catalog.databaseExists(settings.staging_schema):
        return []
    return [r["tableName"] for r in spark.sql(f"SHOW TABLES IN {settings.staging_schema}").collect()
            if r["tableName"].startswith(f"{db}__events__")]


def test_recompute_of_one_day_of_a_string_partitioned_table(spark, settings, db, tmp_path):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version

    target = [(1, "20240308", 1), (2, "20240308", 2), (3, "20240309", 3), (4, "20240309", 4), (5, "20240310", 5)]
    spark.createDataFrame(target, STRING_SCHEMA).coalesce(1).write.format("delta").partitionBy("dt").saveAsTable(f"{db}.events")
    source = [(1, D8, 1), (3, D9, 3), (4, D9, 4), (6, D9, 6), (5, D10, 5)]
    spark.createDataFrame(source, DATED_SCHEMA).write.format("delta").saveAsTable(f"{db}.src")
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "dt",
                                       "partition_format": "yyyyMMdd"},
                            f"SELECT id, date_format(d, 'yyyyMMdd') AS dt, v * 10 AS v FROM {db}.src "
                            "WHERE d >= :range_start AND d < :range_end", staging="durable")
    before_version = current_version(spark, f"{db}.events")
    outside = "dt <> '20240309'"
    before_files, before_log = files_of(spark, f"{db}.events", outside), log_files(spark, f"{db}.events")

    result = run(spark, settings, request)

    assert result.status == "published"
    assert [(p.key, p.current.rows, p.current.files) for p in result.plan.partitions] == [("20240309", 2, 1)]
    expected = [(1, "20240308", 1), (2, "20240308", 2), (3, "20240309", 30), (4, "20240309", 40),
                (6, "20240309", 60), (5, "20240310", 5)]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, STRING_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    assert current_version(spark, f"{db}.events") == before_version + 1 == result.published_version
    assert staging_tables(spark, settings, db) == [result.plan.staging_table.split(".")[-1]]  # kept after publish
    assert files_of(spark, f"{db}.events", outside) == before_files  # rows outside the range: the same files
    kept = {f for f in before_log if '"20240309"' not in f[0]}
    assert kept <= log_files(spark, f"{db}.events") and len(kept) == 2
    post = [c for c in result.checks if c.kind == "post_publish"]
    assert [(c.name, c.partition, c.success) for c in post] == [
        ("written_rows_and_checksum_equal_staging", None, True), ("rows_equal_staging_and_files_replaced", "20240309", True)]


def test_a_staged_value_not_exactly_in_the_format_is_refused_before_anything_is_written(spark, settings, db, tmp_path):
    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import StrayRowsError

    target = [(1, "2024-03-08", 1), (3, "2024-03-09", 3), (5, "2024-03-10", 5)]
    spark.createDataFrame(target, STRING_SCHEMA).coalesce(1).write.format("delta").partitionBy("dt").saveAsTable(f"{db}.events")
    spark.createDataFrame([(3, D9, 3), (4, D9, 4)], DATED_SCHEMA).write.format("delta").saveAsTable(f"{db}.src")
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "dt",
                                       "partition_format": "yyyy-MM-dd"},
                            "SELECT id, CASE WHEN id = 4 THEN '2024-3-9' ELSE date_format(d, 'yyyy-MM-dd') END AS dt, "
                            f"v FROM {db}.src WHERE d >= :range_start AND d < :range_end")
    with pytest.raises(StrayRowsError) as err:
        run(spark, settings, request)
    assert str(err.value).endswith(f"produced rows outside batch 0 [2024-03-09 .. 2024-03-09] of {db}.events: "
                                   "partition 2024-3-9 (1 row, not a yyyy-MM-dd value); nothing written")
    assert current_version(spark, f"{db}.events") == 0
    assert staging_tables(spark, settings, db) == []


def test_a_target_value_of_the_range_not_in_the_format_is_named_at_intake(spark, settings, db, tmp_path):
    from backfill_lib.runner import prepare

    target = [(1, "2024-03-08", 1), (2, "2024-3-9", 2), (3, "2024-03-10", 3)]
    spark.createDataFrame(target, STRING_SCHEMA).coalesce(1).write.format("delta").partitionBy("dt").saveAsTable(f"{db}.events")
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "dt",
                                       "partition_format": "yyyy-MM-dd"}, f"SELECT * FROM {db}.events", D8, D10)
    with pytest.raises(IntakeError) as err:
        prepare(spark, settings, request)
    assert str(err.value) == (
        f"table {db}.events column dt holds partition values in the range that do not match target.partition_format "
        "yyyy-MM-dd: '2024-3-9'; the run would leave their rows beside the recomputed ones (rewrite them in the "
        "format first)")


def make_regions(spark, db: str) -> None:
    """``db.events`` PARTITIONED BY (region, dt) with EU and US rows on 2024-03-08..10, and ``db.src``."""
    target = [(1, "EU", D8, 1), (2, "EU", D9, 2), (3, "EU", D9, 3), (4, "EU", D10, 4), (5, "US", D9, 5),
              (6, "US", D9, 6), (7, "US", D10, 7)]
    spark.createDataFrame(target, REGION_SCHEMA).coalesce(1).write.format("delta").partitionBy("region", "dt") \
        .saveAsTable(f"{db}.events")
    source = [(1, "EU", D8, 1), (2, "EU", D9, 2), (3, "EU", D9, 3), (8, "EU", D9, 8), (5, "US", D9, 5),
              (4, "EU", D10, 4)]
    spark.createDataFrame(source, REGION_SCHEMA).write.format("delta").saveAsTable(f"{db}.src")


def test_recompute_of_one_day_and_region_of_a_table_partitioned_by_region_then_date(spark, settings, db, tmp_path):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version

    make_regions(spark, db)
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "dt", "where": "region = 'EU'"},
                            f"SELECT id, region, dt, v * 10 AS v FROM {db}.src "
                            "WHERE dt >= :range_start AND dt < :range_end AND region = 'EU'")
    outside = "NOT (region = 'EU' AND dt = DATE'2024-03-09')"
    before_files, before_log = files_of(spark, f"{db}.events", outside), log_files(spark, f"{db}.events")

    result = run(spark, settings, request)

    assert result.status == "published"
    # the plan's cost is EU's only: US holds 2 more rows that day
    assert [(p.key, p.current.rows, p.current.files) for p in result.plan.partitions] == [("2024-03-09", 2, 1)]
    assert result.plan.predicate() == "(`dt` >= DATE'2024-03-09' AND `dt` < DATE'2024-03-10') AND ((region = 'EU'))"
    expected = [(1, "EU", D8, 1), (2, "EU", D9, 20), (3, "EU", D9, 30), (8, "EU", D9, 80), (4, "EU", D10, 4),
                (5, "US", D9, 5), (6, "US", D9, 6), (7, "US", D10, 7)]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, REGION_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    assert current_version(spark, f"{db}.events") == 1 == result.published_version
    assert files_of(spark, f"{db}.events", outside) == before_files  # US that day and other days: same files
    kept = {f for f in before_log if f[0] != json.dumps({"dt": "2024-03-09", "region": "EU"})}
    assert kept <= log_files(spark, f"{db}.events") and len(kept) == 4
    post = [c for c in result.checks if c.kind == "post_publish"]
    assert [(c.name, c.partition, c.success) for c in post] == [
        ("written_rows_and_checksum_equal_staging", None, True),
        ("rows_equal_staging_and_files_replaced", "2024-03-09", True)]


def test_a_source_row_outside_the_where_is_refused_with_nothing_written(spark, settings, db, tmp_path):
    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import StrayRowsError

    make_regions(spark, db)
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "dt", "where": "region = 'EU'"},
                            f"SELECT id, region, dt, v FROM {db}.src WHERE dt >= :range_start AND dt < :range_end")
    with pytest.raises(StrayRowsError) as err:
        run(spark, settings, request)
    assert str(err.value).endswith(f"produced rows outside target.where (region = 'EU') in batch 0 "
                                   f"[2024-03-09 .. 2024-03-09] of {db}.events: partition 2024-03-09 (1 row); "
                                   "nothing written")
    assert current_version(spark, f"{db}.events") == 0
    assert staging_tables(spark, settings, db) == []


def test_patch_with_a_where_matches_only_the_targets_rows_inside_it(spark, settings, db, tmp_path):
    from chispa import assert_df_equality

    make_regions(spark, db)
    # id 5 is a US row that day: the staged EU row 5 must not match it (the where is part of the MERGE's ON)
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "dt", "where": "region = 'EU'"},
                            "SELECT * FROM VALUES (2, 'EU', DATE'2024-03-09', 200), (5, 'EU', DATE'2024-03-09', 500) "
                            "AS s(id, region, dt, v) WHERE dt >= :range_start AND dt < :range_end",
                            strategy="patch")
    before_us = files_of(spark, f"{db}.events", "region = 'US'")
    result = run(spark, settings, request)
    assert result.status == "published"
    expected = [(1, "EU", D8, 1), (2, "EU", D9, 200), (3, "EU", D9, 3), (5, "EU", D9, 500), (4, "EU", D10, 4),
                (5, "US", D9, 5), (6, "US", D9, 6), (7, "US", D10, 7)]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, REGION_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    assert files_of(spark, f"{db}.events", "region = 'US'") == before_us


def test_a_where_naming_a_missing_column_exits_2_naming_the_request_and_the_field(spark, settings, db, tmp_path,
                                                                                capsys):
    from backfill_lib.cli import main

    make_regions(spark, db)
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "dt", "where": "regoin = 'EU'"},
                            f"SELECT * FROM {db}.src WHERE dt >= :range_start AND dt < :range_end")
    assert main(["plan", str(request)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {request}: field 'target.where': 'regoin = 'EU'' names column regoin, which table {db}.events "
        "does not have (columns: id, region, dt, v)")
    on_data = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "dt", "where": "v > 1"},
                            f"SELECT * FROM {db}.src WHERE dt >= :range_start AND dt < :range_end")
    assert main(["plan", str(on_data)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {on_data}: field 'target.where': 'v > 1' reads v, which is not a partition column of table "
        f"{db}.events (partition columns: region, dt); where narrows by the other partition columns only")
    sub = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "dt",
                                   "where": f"region IN (SELECT region FROM {db}.src)"},
                        f"SELECT * FROM {db}.src WHERE dt >= :range_start AND dt < :range_end")
    assert main(["plan", str(sub)]) == 2
    assert "holds a subquery (InSubquery); a where is a predicate on partition columns" in capsys.readouterr().err


def test_hour_strings_with_an_offset_keep_the_two_hours_of_a_fall_back_apart(spark, settings, db, tmp_path):
    from chispa import assert_df_equality

    fmt = "yyyy-MM-dd'T'HH:mmXXX"
    schema = StructType([StructField("id", IntegerType(), False), StructField("h", StringType(), True),
                         StructField("v", IntegerType(), True)])
    target = [(1, "2024-11-02T23:00-04:00", 1), (2, "2024-11-03T01:00-04:00", 2), (3, "2024-11-03T01:00-05:00", 3),
              (4, "2024-11-04T00:00-05:00", 4)]
    spark.createDataFrame(target, schema).coalesce(1).write.format("delta").partitionBy("h").saveAsTable(f"{db}.events")
    src_schema = StructType([StructField("id", IntegerType(), False), StructField("ts", TimestampType(), True),
                             StructField("v", IntegerType(), True)])
    source = [(2, datetime(2024, 11, 3, 5, 10, tzinfo=UTC), 2), (3, datetime(2024, 11, 3, 6, 0, tzinfo=UTC), 3),
              (5, datetime(2024, 11, 3, 6, 30, tzinfo=UTC), 5), (4, datetime(2024, 11, 4, 5, 0, tzinfo=UTC), 4)]
    spark.createDataFrame(source, src_schema).write.format("delta").saveAsTable(f"{db}.src")
    request = spark_request(tmp_path, {"table": f"{db}.events", "partition_column": "h", "grain": "hour",
                                       "partition_format": fmt},
                            f"SELECT id, date_format(date_trunc('HOUR', ts), \"{fmt}\") AS h, v * 10 AS v "
                            f"FROM {db}.src WHERE ts >= :range_start AND ts < :range_end",
                            date(2024, 11, 3), date(2024, 11, 3), time_zone="America/New_York")
    result = run(spark, settings, request)
    assert result.status == "published"
    assert len(result.plan.partitions) == 25
    assert {p.key: p.current.rows for p in result.plan.partitions if p.current.rows} == {
        "2024-11-03T01:00-04:00": 1, "2024-11-03T01:00-05:00": 1}
    expected = [(1, "2024-11-02T23:00-04:00", 1), (2, "2024-11-03T01:00-04:00", 20), (3, "2024-11-03T01:00-05:00", 30),
                (5, "2024-11-03T01:00-05:00", 50), (4, "2024-11-04T00:00-05:00", 4)]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, schema),
                       ignore_row_order=True, ignore_nullable=True)
