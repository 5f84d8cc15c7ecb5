"""Targets with a generated partition column (issue 18 item 4): ``event_date DATE GENERATED ALWAYS AS (CAST(ts AS
DATE))``. A source may omit the column (staging computes it as Delta would), a source that supplies another value is
refused at validation, and a run whose publish zone is not its staging zone is refused at intake."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest
from rich.console import Console

from backfill_lib.core.errors import IntakeError, SchemaMismatchError
from backfill_lib.core.partitions import Partition
from backfill_lib.core.table_state import Column, GeneratedColumn, PartitionStats, TableState, generated_columns_of
from backfill_lib.intake.request import BackfillRequest
from backfill_lib.intake.schema_guard import ColumnCast, align
from backfill_lib.plan.builder import build_plan
from backfill_lib.plan.explain import explain
from backfill_lib.plan.model import plan_from_summary

NOW = datetime(2024, 3, 20, 12, 0, tzinfo=timezone.utc)
EVENT_DATE = GeneratedColumn("event_date", "date", "CAST(ts AS DATE)")
COLUMNS = (Column("id", "int", False), Column("ts", "timestamp"), Column("v", "int"), Column("event_date", "date"))


def test_generated_columns_are_read_from_the_schema_field_metadata():
    fields = [("id", "int", {}), ("ts", "timestamp", None),
              ("event_date", "date", {"delta.generationExpression": "CAST(ts AS DATE)", "comment": "day"})]
    assert generated_columns_of(fields) == (EVENT_DATE,)
    assert EVENT_DATE.label == "generated: event_date = CAST(ts AS DATE)"


def test_a_generated_column_the_source_omits_is_computed_and_any_other_missing_column_still_refused():
    source = (Column("id", "int", False), Column("ts", "timestamp"), Column("v", "smallint"))
    casts = align(source, COLUMNS, "s.sql", ("id",), {"event_date": "CAST(ts AS DATE)"})
    assert casts == (ColumnCast("id", "int", False), ColumnCast("ts", "timestamp", False),
                     ColumnCast("v", "int", True),
                     ColumnCast("event_date", "date", False, expression="CAST(ts AS DATE)"))
    # supplied, it is aligned like any column (validation compares it with the expression)
    assert align((*source[:2], Column("v", "int"), Column("event_date", "date")), COLUMNS, "s.sql", ("id",),
                 {"event_date": "CAST(ts AS DATE)"})[-1] == ColumnCast("event_date", "date", False)
    with pytest.raises(SchemaMismatchError) as err:
        align(source, COLUMNS, "s.sql", ("id",))
    assert str(err.value) == "s.sql: target column event_date (DATE) is missing from the source"


def request_of(partition_column="event_date", grain="day", time_zone="UTC", strategy="recompute") -> BackfillRequest:
    whole = strategy == "rebuild"
    return BackfillRequest.model_validate({
        "name": "generated", "owner": "ana@example.com", "reason": "TEST-18", "strategy": strategy,
        "target": {"table": "db.events", "partition_column": partition_column, "grain": grain},
        **({} if whole else {"range": {"start": "2024-03-09", "end": "2024-03-09"}}), "time_zone": time_zone,
        "source": {"sql": "s.sql"}, "keys": ["id"]})


def plan_of(request, state):
    return build_plan(request, state, request_path="r.yml", staging_schema="stg", batch_size=None, now=NOW,
                      run_id="bf_generated")


def test_the_plan_names_the_generated_columns_and_refuses_a_rebuild_and_a_publish_zone_unlike_the_staging_zone():
    state = TableState("db.events", "file:/tmp/events", 4, COLUMNS, ("event_date",),
                       {"2024-03-09": PartitionStats(1, 2048, 3, "x")}, generated=(EVENT_DATE,))
    plan = plan_of(request_of(time_zone="America/New_York"), state)
    assert plan.target_generated == (EVENT_DATE,)
    assert plan_from_summary(plan.summary()).target_generated == (EVENT_DATE,)
    console = Console(record=True, width=400)
    console.print(explain(plan))
    line = next(x for x in console.export_text().splitlines() if x.startswith("generated columns"))
    assert line.split("  ", 1)[1].strip() == (
        "event_date = CAST(ts AS DATE) (Delta generates it on write: a source that omits such a column gets it "
        "computed by its expression when staging, in time zone America/New_York; a source that supplies it is "
        "checked against the expression at validation)")
    with pytest.raises(IntakeError) as err:
        plan_of(request_of(strategy="rebuild"), state)
    assert str(err.value) == (
        "table db.events column event_date is GENERATED ALWAYS AS (CAST(ts AS DATE)): strategy rebuild re-creates the "
        "table from the staged rows' schema (CREATE OR REPLACE TABLE ... AS SELECT), which would drop the generation "
        "expression; use strategy recompute over the table's range")
    # hour partitions publish in UTC: a New York run would compute the hour in another zone than Delta does
    hourly = (Column("id", "int"), Column("ts", "timestamp"), Column("ts_hour", "timestamp"))
    state = TableState("db.events", "file:/tmp/events", 4, hourly, ("ts_hour",), {},
                       generated=(GeneratedColumn("ts_hour", "timestamp", "date_trunc('HOUR', ts)"),))
    with pytest.raises(IntakeError) as err:
        plan_of(request_of("ts_hour", "hour", "America/New_York"), state)
    assert str(err.value) == (
        "table db.events column ts_hour is GENERATED ALWAYS AS (date_trunc('HOUR', ts)): Delta evaluates it when "
        "publishing, in time zone UTC (hour partitions are written in UTC), but the run computes and checks it in "
        "America/New_York (field time_zone); its staged value could differ from Delta's, so the request is "
        "refused: use time_zone: UTC for this table")
    utc = plan_of(request_of("ts_hour", "hour", "UTC"), state)  # in UTC, both zones are one
    assert (len(utc.partitions), utc.partitions[0].partition) == (24, Partition(
        datetime(2024, 3, 9, tzinfo=timezone.utc), datetime(2024, 3, 9, 1, tzinfo=timezone.utc),
        "2024-03-09T00:00:00+00:00"))


# --- Spark: real backfills on tiny Delta tables -------------------------------------------------------------

from tests.conftest import write_request  # noqa: E402
from tests.e2e.test_layouts import files_of, run, staging_tables  # noqa: E402

D9 = date(2024, 3, 9)
ROWS = "id, ts, v, event_date"


def make_events(spark, db: str) -> None:
    """``db.events`` partitioned by a generated ``event_date`` (written in UTC, the settings' zone): one row on
    2024-03-08, two on 2024-03-09, one on 2024-03-10."""
    spark.sql(f"CREATE TABLE {db}.events (id INT, ts TIMESTAMP, v INT, "
              "event_date DATE GENERATED ALWAYS AS (CAST(ts AS DATE))) USING delta PARTITIONED BY (event_date)")
    spark.sql(f"INSERT INTO {db}.events (id, ts, v) VALUES (1, TIMESTAMP'2024-03-08 12:00:00Z', 1), "
              "(2, TIMESTAMP'2024-03-09 12:00:00Z', 2), (3, TIMESTAMP'2024-03-09 15:00:00Z', 3), "
              "(4, TIMESTAMP'2024-03-10 12:00:00Z', 4)")


def rows_of(spark, values: str):
    """A frame of ``(id, ts, v, event_date)`` rows from SQL ``VALUES`` text (timestamps with explicit offsets)."""
    return spark.sql(f"SELECT * FROM VALUES {values} AS r({ROWS})")


def request_file(tmp_path, db: str, sql: str, start=D9, end=D9, **extra):
    sql_file = tmp_path / "generated.sql"
    sql_file.write_text(sql)
    fields = {"owner": "ana@example.com", "reason": "TEST-18: generated columns",
              "target": {"table": f"{db}.events", "partition_column": "event_date"},
              "range": {"start": start.isoformat(), "end": end.isoformat()}, "time_zone": "UTC",
              "strategy": "recompute", "source": {"sql": str(sql_file)}, "keys": ["id"], **extra}
    return write_request(tmp_path / "generated.yml", **fields)


def test_a_new_york_recompute_of_one_day_whose_source_omits_the_generated_column(spark, settings, db, tmp_path,
                                                                                   capsys):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.cli import main
    from backfill_lib.runner import Runner, prepare

    make_events(spark, db)
    # id 5 at 03:30 UTC on 2024-03-10 is 22:30 on 2024-03-09 in New York: the request's day; id 6 (04:30 UTC on
    # 2024-03-09, 23:30 on 2024-03-08 there) is outside it. d is the New York date, for the reconciliation rule.
    spark.sql(f"CREATE TABLE {db}.raw USING delta PARTITIONED BY (d) AS SELECT * FROM VALUES "
              "(2, TIMESTAMP'2024-03-09 12:00:00Z', 2, DATE'2024-03-09'), "
              "(3, TIMESTAMP'2024-03-09 15:00:00Z', 3, DATE'2024-03-09'), "
              "(5, TIMESTAMP'2024-03-10 03:30:00Z', 5, DATE'2024-03-09'), "
              "(6, TIMESTAMP'2024-03-09 04:30:00Z', 6, DATE'2024-03-08') AS r(id, ts, v, d)")
    request = request_file(
        tmp_path, db, f"SELECT id, ts, v * 10 AS v FROM {db}.raw WHERE ts >= :range_start AND ts < :range_end",
        time_zone="America/New_York", reconciliation=[
            {"name": "rows_equal_raw", "metric": "count(*)",  # grouped by event_date, which the source omits
             "source": {"table": f"{db}.raw", "partition_column": "d", "metric": "count(*)"}}])
    assert main(["plan", str(request)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "generated columns event_date = CAST(ts AS DATE) (Delta generates it on write" in out
    assert "in time zone America/New_York;" in out
    outside = "event_date <> DATE'2024-03-09'"
    before_files, before_version = files_of(spark, f"{db}.events", outside), current_version(spark, f"{db}.events")

    # settings (and the session) in UTC, the request in New York
    in_utc = settings.model_copy(update={"time_zone": "UTC"})
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        plan, state = prepare(spark, in_utc, request)
        result = Runner(spark, in_utc, Console(file=open("/dev/null", "w"))).run(plan, state)
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)

    assert result.status == "published"
    assert [(p.key, p.current.rows) for p in result.plan.partitions] == [("2024-03-09", 2)]
    expected = rows_of(spark, "(1, TIMESTAMP'2024-03-08 12:00:00Z', 1, DATE'2024-03-08'), "
                              "(2, TIMESTAMP'2024-03-09 12:00:00Z', 20, DATE'2024-03-09'), "
                              "(3, TIMESTAMP'2024-03-09 15:00:00Z', 30, DATE'2024-03-09'), "
                              "(5, TIMESTAMP'2024-03-10 03:30:00Z', 50, DATE'2024-03-09'), "
                              "(4, TIMESTAMP'2024-03-10 12:00:00Z', 4, DATE'2024-03-10')")
    assert_df_equality(spark.table(f"{db}.events"), expected, ignore_row_order=True, ignore_nullable=True)
    assert current_version(spark, f"{db}.events") == before_version + 1 == result.published_version
    assert files_of(spark, f"{db}.events", outside) == before_files  # rows outside the range: the same files
    checks = {c.name: c.success for c in result.checks if c.kind == "constraint"}
    assert checks["generated: event_date = CAST(ts AS DATE)"] is True
    assert [(c.partition, c.observed, c.success) for c in result.checks if c.name == "rows_equal_raw"] == [
        ("2024-03-09", "3", True)]


def test_a_source_supplying_another_event_date_is_refused_at_validation(spark, settings, db, tmp_path):
    from backfill_lib.adapters.delta_log import current_version
    from backfill_lib.core.errors import GateFailedError

    make_events(spark, db)
    # id 4's event_date says 2024-03-09 but its ts is on 2024-03-10: inside the range, so not a stray row
    request = request_file(
        tmp_path, db,
        "SELECT * FROM VALUES (2, TIMESTAMP'2024-03-09 12:00:00Z', 2, DATE'2024-03-09'), "
        "(3, TIMESTAMP'2024-03-09 15:00:00Z', 3, DATE'2024-03-09'), "
        "(4, TIMESTAMP'2024-03-10 12:00:00Z', 4, DATE'2024-03-09'), "
        "(8, TIMESTAMP'2024-03-10 13:00:00Z', 8, DATE'2024-03-10') AS s(id, ts, v, event_date) "
        "WHERE ts >= :range_start AND ts < :range_end", end=date(2024, 3, 10), staging="durable")
    with pytest.raises(GateFailedError) as err:
        run(spark, settings, request)
    assert err.value.exit_code == 3
    [staging] = staging_tables(spark, settings, db)  # kept for review
    assert [c.describe() for c in err.value.failures] == [
        "constraint generated: event_date = CAST(ts AS DATE) failed on the range: 1 staged row of "
        f"{settings.staging_schema}.{staging} has a value of event_date other than "
        "CAST(ts AS DATE) (Delta would refuse it at publish; leave event_date out of the source to have it "
        "computed), e.g. event_date 2024-03-09 where CAST(ts AS DATE) is 2024-03-10, in partition 2024-03-09 (1 row)"]
    assert str(err.value).startswith(f"validation gate failed for {db}.events, nothing published: 1 failed checks")
    assert current_version(spark, f"{db}.events") == 1  # the CREATE and the INSERT only


def test_a_patch_whose_source_omits_the_generated_column(spark, settings, db, tmp_path):
    from chispa import assert_df_equality

    from backfill_lib.adapters.delta_log import current_version

    make_events(spark, db)
    request = request_file(
        tmp_path, db,
        "SELECT * FROM VALUES (3, TIMESTAMP'2024-03-09 15:00:00Z', 300), (7, TIMESTAMP'2024-03-09 23:59:59Z', 7) "
        "AS s(id, ts, v) WHERE ts >= :range_start AND ts < :range_end", strategy="patch")
    result = run(spark, settings, request)
    assert result.status == "published"
    expected = rows_of(spark, "(1, TIMESTAMP'2024-03-08 12:00:00Z', 1, DATE'2024-03-08'), "
                              "(2, TIMESTAMP'2024-03-09 12:00:00Z', 2, DATE'2024-03-09'), "
                              "(3, TIMESTAMP'2024-03-09 15:00:00Z', 300, DATE'2024-03-09'), "
                              "(7, TIMESTAMP'2024-03-09 23:59:59Z', 7, DATE'2024-03-09'), "
                              "(4, TIMESTAMP'2024-03-10 12:00:00Z', 4, DATE'2024-03-10')")
    assert_df_equality(spark.table(f"{db}.events"), expected, ignore_row_order=True, ignore_nullable=True)
    assert current_version(spark, f"{db}.events") == 2 == result.published_version
