"""Time zones: a run's SQL runs in the request's zone whatever the settings' zone, and hour partitions of a DST
fall-back night keep their own partition values.

The test session runs in the settings' zone (America/New_York, conf/settings.yml); each test sets the zone its
case needs and puts it back.
"""

import contextlib
import json
from datetime import date, datetime, timezone

import pytest
from chispa import assert_df_equality
from pyspark.sql.types import DateType, IntegerType, StructField, StructType, TimestampType
from rich.console import Console

from backfill_lib.adapters.delta_log import current_version, partition_stats
from backfill_lib.cli import main
from backfill_lib.core.errors import IntakeError
from backfill_lib.plan.explain import explain
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from tests.conftest import write_request

ZONE = "spark.sql.session.timeZone"


@contextlib.contextmanager
def session_zone(spark, name):
    previous = spark.conf.get(ZONE)
    spark.conf.set(ZONE, name)
    try:
        yield
    finally:
        spark.conf.set(ZONE, previous)


def utc(day: int, hour: int, minute: int = 0, month: int = 3) -> datetime:
    return datetime(2024, month, day, hour, minute, tzinfo=timezone.utc)


# --- a DATE partition derived with to_date(ts), request in Asia/Kolkata (UTC+05:30), settings in UTC -----------

ORDERS = StructType([StructField("id", IntegerType(), False), StructField("ts", TimestampType(), True),
                     StructField("d", DateType(), True), StructField("v", IntegerType(), True)])
ORDERS_SRC = StructType([StructField("id", IntegerType(), False), StructField("ts", TimestampType(), True),
                         StructField("v", IntegerType(), True)])
D9, D10, D11 = date(2024, 3, 9), date(2024, 3, 10), date(2024, 3, 11)
# id 1: 2024-03-09 20:00Z is 2024-03-10 01:30 in Kolkata (in range; its UTC date is not)
# id 2: 2024-03-10 20:00Z is 2024-03-11 01:30 in Kolkata (out of range; its UTC date is in it)
# id 3: 2024-03-10 06:00Z is 2024-03-10 in both zones; id 0: 2024-03-09 in both
KOLKATA_ROWS = [(0, utc(9, 0), D9, 0), (1, utc(9, 20), D10, 1), (3, utc(10, 6), D10, 3), (2, utc(10, 20), D11, 2)]


def orders_request(tmp_path, db, time_zone="Asia/Kolkata"):
    sql = tmp_path / "orders.sql"
    sql.write_text(f"SELECT id, ts, to_date(ts) AS d, v * 10 AS v FROM {db}.orders_src "
                   "WHERE to_date(ts) >= :range_start AND to_date(ts) < :range_end")
    return write_request(
        tmp_path / "orders.yml", owner="ana@example.com", reason="TEST-17: local dates",
        target={"table": f"{db}.orders", "partition_column": "d", "grain": "day"},
        range={"start": "2024-03-10", "end": "2024-03-10"}, time_zone=time_zone, strategy="recompute",
        source={"sql": str(sql)}, keys=["id"],
    )


def make_orders(spark, db):
    spark.createDataFrame(KOLKATA_ROWS, ORDERS).write.format("delta").partitionBy("d").saveAsTable(f"{db}.orders")
    spark.createDataFrame([(i, ts, v) for i, ts, _, v in KOLKATA_ROWS], ORDERS_SRC).write.format("delta") \
        .saveAsTable(f"{db}.orders_src")


def test_request_zone_derives_local_dates_whatever_the_settings_zone(spark, settings, db, tmp_path, capsys,
                                                                      make_runner):
    make_orders(spark, db)
    in_utc = settings.model_copy(update={"time_zone": "UTC"})
    with session_zone(spark, "UTC"):
        plan, state = prepare(spark, in_utc, orders_request(tmp_path, db))
        assert spark.conf.get(ZONE) == "UTC"  # prepare put the session's zone back
        assert plan.session_time_zone == "Asia/Kolkata"
        result = make_runner(time_zone="UTC").run(plan, state)
        assert spark.conf.get(ZONE) == "UTC"

    assert result.status == "published"
    assert [c for c in result.checks if not c.success] == []
    assert current_version(spark, f"{db}.orders") == 1 == result.published_version
    expected = spark.createDataFrame(
        [(0, utc(9, 0), D9, 0), (1, utc(9, 20), D10, 10), (3, utc(10, 6), D10, 30), (2, utc(10, 20), D11, 2)], ORDERS)
    assert_df_equality(spark.table(f"{db}.orders"), expected, ignore_row_order=True, ignore_nullable=True)
    ledger = Ledger(spark, in_utc.ledger_schema)
    assert json.loads(ledger.run(plan.run_id)["plan_json"])["session_time_zone"] == "Asia/Kolkata"
    assert [(p["partition"], p["rows"]) for p in ledger.partitions(plan.run_id)] == [("2024-03-10", 2)]
    report = (settings.runs_dir / plan.run_id / "report.md").read_text()
    assert "Spark session time zone Asia/Kolkata (the request's time_zone)" in report

    Console(file=None, width=200).print(explain(plan))
    assert "session time zone Asia/Kolkata" in capsys.readouterr().out


def test_zone_the_spark_session_cannot_take_is_refused_naming_both_zones(spark, settings, db, tmp_path, capsys):
    # Python's tzdata knows America/Coyhaique (2025); the JVM's time-zone database of this Java 17 does not.
    make_orders(spark, db)
    request = orders_request(tmp_path, db, time_zone="America/Coyhaique")
    with pytest.raises(IntakeError, match=r"time_zone America/Coyhaique: the Spark session \(time zone "
                                          r"America/New_York\) cannot run in it"):
        prepare(spark, settings, request)
    assert spark.conf.get(ZONE) == "America/New_York"
    assert main(["plan", str(request)]) == 2
    assert "America/Coyhaique" in capsys.readouterr().err
    assert current_version(spark, f"{db}.orders") == 0


# --- hour grain across the Europe/Berlin fall-back of 2024-10-27: 02:00 CEST (00:00Z) and 02:00 CET (01:00Z) -----

HITS = StructType([StructField("id", IntegerType(), False), StructField("h", TimestampType(), True),
                   StructField("v", IntegerType(), True)])
OCT = 10
FALL_BACK = [(1, utc(26, 23, month=OCT), 1), (2, utc(27, 0, month=OCT), 2), (3, utc(27, 0, month=OCT), 3),
             (4, utc(27, 1, month=OCT), 4), (5, utc(27, 2, month=OCT), 5)]


def test_fall_back_hours_keep_their_own_partitions_in_a_dst_session(spark, settings, db, tmp_path, make_runner):
    with session_zone(spark, "UTC"):  # so that the tables start with both repeated hours apart
        for name in ("hits", "hits_src"):
            spark.createDataFrame(FALL_BACK, HITS).write.format("delta").partitionBy("h").saveAsTable(f"{db}.{name}")
    sql = tmp_path / "hits.sql"
    sql.write_text(f"SELECT id, h, v * 10 AS v FROM {db}.hits_src WHERE h >= :range_start AND h < :range_end")
    request = write_request(
        tmp_path / "hits.yml", owner="ana@example.com", reason="TEST-17: fall-back hours",
        target={"table": f"{db}.hits", "partition_column": "h", "grain": "hour"},
        range={"start": "2024-10-27", "end": "2024-10-27"}, time_zone="Europe/Berlin", strategy="recompute",
        source={"sql": str(sql)}, keys=["id"],
    )
    berlin = settings.model_copy(update={"time_zone": "Europe/Berlin"})
    with session_zone(spark, "Europe/Berlin"):
        plan, state = prepare(spark, berlin, request)
        assert len(plan.partitions) == 25  # the fall-back day
        assert [p.key for p in plan.partitions[2:4]] == ["2024-10-27T02:00:00+02:00", "2024-10-27T02:00:00+01:00"]
        assert [p.current.rows for p in plan.partitions[1:4]] == [1, 2, 1]
        result = make_runner(time_zone="Europe/Berlin").run(plan, state)
        assert spark.conf.get(ZONE) == "Europe/Berlin"

    assert result.status == "published"
    assert (result.pre_publish_version, result.published_version, current_version(spark, f"{db}.hits")) == (0, 1, 1)
    assert spark.sql(f"DESCRIBE HISTORY {db}.hits").where("operation = 'RESTORE'").count() == 0
    post = {(c.name, c.partition): c.success for c in result.checks if c.kind == "post_publish"}
    assert post[("rows_equal_staging_and_files_replaced", "2024-10-27T02:00:00+01:00")] is True
    # Delta's log keeps each hour's own UTC value
    assert sorted(partition_stats(spark, f"{db}.hits", "h")) == [
        "2024-10-26T23:00:00.000000Z", "2024-10-27T00:00:00.000000Z", "2024-10-27T01:00:00.000000Z",
        "2024-10-27T02:00:00.000000Z"]
    expected = spark.createDataFrame([(i, h, v * 10) for i, h, v in FALL_BACK], HITS)
    assert_df_equality(spark.table(f"{db}.hits"), expected, ignore_row_order=True, ignore_nullable=True)

    ledger = Ledger(spark, berlin.ledger_schema)
    stored = json.loads(ledger.run(plan.run_id)["plan_json"])
    assert (stored["session_time_zone"], stored["write_time_zone"]) == ("Europe/Berlin", "UTC")
    rows = {p["partition"]: p["rows"] for p in ledger.partitions(plan.run_id)}
    assert (rows["2024-10-27T02:00:00+02:00"], rows["2024-10-27T02:00:00+01:00"]) == (2, 1)
    report = (settings.runs_dir / plan.run_id / "report.md").read_text()
    assert "Spark session time zone Europe/Berlin (the request's time_zone); hour partitions written in UTC" in report
