"""Issue 18 item 5: path-based tables ``delta.`<path>``` as target, source and mart (EMR without a catalog).

The pure tests (no Spark) come first: parsing, quoting and the staging name; then real backfills on tiny Delta
tables saved by path, with a space and a back-quote in the paths."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest
from rich.console import Console

from backfill_lib.core.errors import RequestError
from backfill_lib.core.table_names import (
    check_table_name,
    is_absolute_path,
    path_slug,
    path_staging_table,
    path_table,
    table_path,
)
from backfill_lib.core.table_state import Column, PartitionStats, TableState
from backfill_lib.intake.request import BackfillRequest, load_request
from backfill_lib.plan.builder import build_plan, staging_table_name
from backfill_lib.plan.explain import explain

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


# --- pure: names ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("written, canonical, path", [
    ("delta.`/data/events`", "delta.`/data/events`", "/data/events"),
    ("DELTA.`/data/events/`", "delta.`/data/events`", "/data/events"),  # one table, one name
    ("delta.`s3://bucket/wh/events`", "delta.`s3://bucket/wh/events`", "s3://bucket/wh/events"),
    ("delta.`file:///tmp/a b/t`", "delta.`file:///tmp/a b/t`", "file:///tmp/a b/t"),
    ("delta.`/tmp/a``b/t`", "delta.`/tmp/a``b/t`", "/tmp/a`b/t"),  # a back-quote inside is doubled
    ("sales.orders", "sales.orders", None),
    ("main.sales.orders", "main.sales.orders", None),
])
def test_a_path_name_is_parsed_and_spelt_one_way(written, canonical, path):
    assert check_table_name(written) == canonical
    assert table_path(canonical) == path
    if path is not None:
        assert path_table(path) == canonical


@pytest.mark.parametrize("written, message", [
    ("delta.`data/events`", "the path 'data/events' is not absolute"),
    ("delta.`./events`", "the path './events' is not absolute"),
    ("delta.`s3://bucket`", "the path 's3://bucket' is not absolute"),
    ("delta.``", "the path '' is not absolute"),
    ("delta.`/a`b`", "is not a path-based table name: write delta.`<absolute path>`, with a back-quote inside"),
    ("delta.`/a\nb`", "the path holds a control character"),
    ("parquet.`/data/events`", "is not a table name of the form [catalog.]schema.table or delta.`<absolute path>`"),
    ("a.b.c.d", "is not a table name of the form"),
])
def test_a_relative_or_malformed_path_name_is_refused(written, message):
    with pytest.raises(ValueError) as err:
        check_table_name(written)
    assert message in str(err.value)


def test_absolute_paths_are_those_delta_resolves():
    assert [is_absolute_path(p) for p in ("/t", "file:/tmp/t", "file:///tmp/t", "s3a://b/t", "abfss://c@a.dfs/t")] \
        == [True] * 5
    assert [is_absolute_path(p) for p in ("t", "./t", "../t", "s3://b", "s3://b/", "/", "")] == [False] * 7


def test_a_path_target_stages_into_the_staging_schema_under_a_name_unique_per_path():
    name = staging_table_name("delta.`/wh/Sales Data/ev``ents`", "backfill_staging", "bf_1")
    digest = __import__("hashlib").sha256(b"/wh/Sales Data/ev`ents").hexdigest()[:10]
    assert name == f"backfill_staging.path__sales_data_ev_ents__{digest}__bf_1"
    # same slug, different paths: different tables
    assert path_slug("/a/x/t") == path_slug("/b/x/t") == "x_t"
    assert path_staging_table("/a/x/t", "s", "r") != path_staging_table("/b/x/t", "s", "r")
    assert path_slug("s3://bucket/" + "d" * 60) == "d" * 40
    assert path_slug("s3://bucket/%%/!!") == "path"
    assert staging_table_name("main.sales.orders", "stg", "r") == "main.stg.sales__orders__r"  # unchanged


def test_a_protected_path_is_protected_however_it_is_spelt():
    from backfill_lib.core.errors import PublishError
    from backfill_lib.publish.safety import check_protected

    with pytest.raises(PublishError, match=r"table delta.`/wh/t` is protected \(settings protected_tables\)"):
        check_protected(("DELTA.`/wh/t/`",), ["delta.`/wh/t`"], None)
    check_protected(("delta.`/wh/t`",), ["delta.`/wh/t2`", "wh.t"], None)  # other tables: no approver needed


def request_fields(tmp_path, table: str, **extra) -> dict:
    sql = tmp_path / "paths.sql"
    sql.write_text("SELECT 1 AS id")
    return {"owner": "ana@example.com", "reason": "TEST-18: paths", "target": {"table": table, "partition_column": "d"},
            "range": {"start": "2024-03-09", "end": "2024-03-09"}, "strategy": "recompute",
            "source": {"sql": str(sql)}, "keys": ["id"], **extra}


def test_a_relative_path_is_refused_at_intake_naming_the_field(tmp_path):
    from tests.conftest import write_request

    path = write_request(tmp_path / "r.yml", **request_fields(tmp_path, "delta.`wh/events`"))
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert str(err.value) == (f"{path}: field 'target.table': 'delta.`wh/events`': the path 'wh/events' is not "
                              "absolute; a path-based table needs an absolute path (/data/t, s3://bucket/t, file:/tmp/t)")
    mart = {"table": "delta.`/wh/daily`", "partition_column": "d", "sql": str(tmp_path / "paths.sql"), "keys": ["id"]}
    marts = write_request(tmp_path / "m.yml", **request_fields(tmp_path, "delta.`/wh/events`", marts=[
        mart, {**mart, "table": "delta.`/wh/monthly`", "depends_on": ["delta.`/wh/daily/`"]}]))
    request = load_request(marts)  # the dependency spelt with a trailing slash names the same mart
    assert [m.table for m in request.marts] == ["delta.`/wh/daily`", "delta.`/wh/monthly`"]
    assert request.marts[1].depends_on == ("delta.`/wh/daily`",)


def test_backfill_plan_names_the_path_layout_and_its_staging_table(tmp_path):
    request = BackfillRequest.model_validate({"name": "p", **request_fields(tmp_path, "delta.`/wh/a b/events`")})
    state = TableState("delta.`/wh/a b/events`", "file:/wh/a b/events", 3, (Column("id", "int"), Column("d", "date")),
                       ("d",), {"2024-03-09": PartitionStats(1, 10, 2, "x")})
    plan = build_plan(request, state, request_path="r.yml", staging_schema="stg", batch_size=None, now=NOW,
                      run_id="bf_p")
    console = Console(record=True, width=400)
    console.print(explain(plan))
    text = console.export_text()
    staging = path_staging_table("/wh/a b/events", "stg", "bf_p")
    assert plan.staging_table == staging
    assert (f"target                 delta.`/wh/a b/events` at version 3 (path-based: the Delta table at /wh/a b/events, "
            f"no catalog entry; staged in {staging}, a table of the settings' staging_schema named after the path)") in text
    assert "replaceWhere on delta.`/wh/a b/events`: (`d` >= DATE'2024-03-09' AND `d` < DATE'2024-03-10')" in text


# --- Spark: real backfills on Delta tables saved by path ----------------------------------------------------

from pyspark.sql.types import DateType, IntegerType, LongType, StructField, StructType  # noqa: E402

from tests.conftest import write_request  # noqa: E402

D8, D9, D10 = date(2024, 3, 8), date(2024, 3, 9), date(2024, 3, 10)
SCHEMA = StructType([StructField("id", IntegerType(), False), StructField("d", DateType(), True),
                     StructField("v", IntegerType(), True)])
TARGET_ROWS = [(1, D8, 1), (2, D8, 2), (3, D9, 3), (4, D9, 4), (5, D10, 5)]


def save(spark, rows, path, partitioned: bool = True) -> str:
    """Save ``rows`` as a Delta table at ``path`` (one file per partition) and return its path-based name."""
    writer = spark.createDataFrame(rows, SCHEMA).coalesce(1).write.format("delta")
    (writer.partitionBy("d") if partitioned else writer).save(str(path))
    return path_table(str(path))


def path_request(tmp_path, table: str, sql: str, **extra):
    sql_file = tmp_path / "paths.sql"
    sql_file.write_text(sql)
    fields = {"owner": "ana@example.com", "reason": "TEST-18: paths", "target": {"table": table, "partition_column": "d"},
              "range": {"start": D9.isoformat(), "end": D9.isoformat()}, "time_zone": "UTC", "strategy": "recompute",
              "source": {"sql": str(sql_file)}, "keys": ["id"], **extra}
    return write_request(tmp_path / "paths.yml", **fields)


MONTHLY = StructType([StructField("month", DateType(), True), StructField("n", LongType(), True),
                      StructField("total", LongType(), True)])


def test_recompute_of_one_day_of_a_path_table_from_a_pinned_path_source_with_a_path_mart_then_rollback(
        spark, settings, tmp_path, make_runner, capsys):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.cli import main
    from backfill_lib.runner import prepare
    from tests.e2e.test_layouts import files_of

    target = save(spark, TARGET_ROWS, tmp_path / "wh a`b" / "events")
    source = save(spark, [(3, D9, 3), (6, D9, 6), (5, D10, 5)], tmp_path / "src dir`x" / "src", partitioned=False)
    spark.createDataFrame([(4, D9, 4)], SCHEMA).write.format("delta").mode("append").save(table_path(source))
    monthly_path = tmp_path / "marts" / "monthly"
    spark.createDataFrame([(date(2024, 3, 1), 5, 15)], MONTHLY).write.format("delta").partitionBy("month") \
        .save(str(monthly_path))
    monthly = path_table(str(monthly_path) + "/")  # spelt with a trailing slash: the same table
    mart_sql = tmp_path / "monthly.sql"
    mart_sql.write_text(f"SELECT trunc(d, 'MM') AS month, count(*) AS n, sum(v) AS total FROM {target} "
                        "WHERE d >= :range_start AND d < :range_end GROUP BY trunc(d, 'MM')")
    request = path_request(tmp_path, target, f"SELECT id, d, v * 10 AS v FROM {source} "
                                             "WHERE d >= :range_start AND d < :range_end",
                           marts=[{"table": monthly, "partition_column": "month", "grain": "month",
                                   "sql": str(mart_sql), "keys": ["month"]}],
                           staging="durable")  # its staging table, in the staging schema, is read below
    before, outside = spark.table(target).collect(), "d <> DATE'2024-03-09'"
    before_files = files_of(spark, target, outside)

    plan, state = prepare(spark, settings, request)
    result = make_runner().run(plan, state)

    assert result.status == "published" and [m.status for m in result.marts] == ["published"]
    assert plan.staging_table.startswith(f"{settings.staging_schema}.path__wh_a_b_events__")
    assert [(s.table, s.version) for s in result.plan.source_versions] == [(source, 1)]  # read at that version
    expected = [(1, D8, 1), (2, D8, 2), (3, D9, 30), (4, D9, 40), (6, D9, 60), (5, D10, 5)]
    assert_df_equality(spark.table(target), spark.createDataFrame(expected, SCHEMA), ignore_row_order=True,
                       ignore_nullable=True)
    assert current_version(spark, target) == 1 == result.published_version
    assert files_of(spark, target, outside) == before_files  # rows outside the range: the same files
    assert spark.table(plan.staging_table).count() == 3  # kept after publish, in the staging schema
    assert result.marts[0].plan.target_table == path_table(str(monthly_path))
    assert [tuple(r) for r in spark.table(path_table(str(monthly_path))).collect()] == [(date(2024, 3, 1), 6, 138)]

    assert main(["rollback", plan.run_id, "--by", "ana@example.com", "--reason", "TEST-18: undo"]) == 0

    assert_df_equality(spark.table(target), spark.createDataFrame(before, SCHEMA), ignore_row_order=True,
                       ignore_nullable=True)
    assert [tuple(r) for r in spark.table(path_table(str(monthly_path))).collect()] == [(date(2024, 3, 1), 5, 15)]
    last = spark.sql(f"DESCRIBE HISTORY {target} LIMIT 1").first()
    assert (last["version"], last["operation"]) == (2, "RESTORE")
    capsys.readouterr()
    assert main(["history", target]) == 0
    out = capsys.readouterr().out
    assert plan.run_id in out and "rollback" in out


def test_a_non_delta_path_exits_2_naming_the_field_and_plan_names_the_layout(spark, settings, tmp_path, capsys):
    from backfill_lib.cli import main

    target = save(spark, TARGET_ROWS, tmp_path / "events")
    (tmp_path / "plain").mkdir()
    spark.createDataFrame(TARGET_ROWS, SCHEMA).write.parquet(str(tmp_path / "parquet"))
    sql = f"SELECT * FROM {target} WHERE d >= :range_start AND d < :range_end"

    relative = path_request(tmp_path, "delta.`events`", sql)
    assert main(["plan", str(relative)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {relative}: field 'target.table': 'delta.`events`': the path 'events' is not absolute; a path-based "
        "table needs an absolute path (/data/t, s3://bucket/t, file:/tmp/t)")
    missing = path_request(tmp_path, path_table(str(tmp_path / "plain")), sql)
    assert main(["plan", str(missing)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {missing}: field 'target.table': table delta.`{tmp_path}/plain` is not a Delta table: no Delta log "
        f"at {tmp_path}/plain (a path-based table names a Delta table's directory)")
    mart = {"table": path_table(str(tmp_path / "parquet")), "partition_column": "d", "sql": str(tmp_path / "paths.sql"),
            "keys": ["id"]}
    with_mart = path_request(tmp_path, target, sql, marts=[mart])
    assert main(["plan", str(with_mart)]) == 2
    assert capsys.readouterr().err.strip().startswith(
        f"error: {with_mart}: field 'marts.0.table': table delta.`{tmp_path}/parquet` is not a Delta table")

    assert main(["plan", str(path_request(tmp_path, target, sql))]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"target {target} at version 0 (path-based: the Delta table at {tmp_path}/events, no catalog entry" in out
    assert f"replaceWhere on {target}: (`d` >= DATE'2024-03-09' AND `d` < DATE'2024-03-10')" in out
