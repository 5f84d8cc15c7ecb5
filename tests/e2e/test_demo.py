"""The demo as a new user meets it: the README's demo line typed as written, each command its own process on one
home, then the backfill checked against an independent computation, a rollback, and commands back to back."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from backfill_lib.adapters.session import SHORT_LIVED_JVM_OPTIONS
from tests.conftest import ROOT

pytestmark = pytest.mark.demo
COLUMNS = ["flight_date", "origin", "dest", "carrier", "flights", "cancelled", "mean_arr_delay_min", "total_arr_delay_min"]
REQUEST = "conf/backfills/fix_daily_route_delays.yml"


def readme_demo_line() -> str:
    """The README's demo line, exactly as a user copies it."""
    lines = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("backfill demo && ")]
    assert len(lines) == 1, lines
    return lines[0]


#: Java options of every JVM the commands start (spark-submit reads ``SPARK_SUBMIT_OPTS``, silently): C1 only, as
#: ``backfill plan`` and ``status`` have anyway (SHORT_LIVED_JVM_OPTIONS), the crash tests' processes and the
#: cluster test's JVMs. On 2 cores, C2's compiler threads took about a third of these cold, one-to-two-minute
#: processes' CPU (see the commit). What the commands do and print is the same.
JIT_OPTIONS = SHORT_LIVED_JVM_OPTIONS


def shell(command: str, home: Path, timeout: int = 1800) -> subprocess.CompletedProcess:
    """Run ``command`` in bash from the repository, as a user's shell would, on the local default at ``home``
    (each JVM with :data:`JIT_OPTIONS`)."""
    env = {**os.environ, "BACKFILL_HOME": str(home),
           "SPARK_SUBMIT_OPTS": f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {JIT_OPTIONS}".strip(),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def independent_daily(spark, flights, where):
    """demo.daily_route_delays computed with the DataFrame API straight from demo.flights (not the SQL file)."""
    f = flights.where(where)
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


def last_commit(spark, path: Path):
    return spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy(F.col("version").desc()).first()


def test_the_readme_demo_line_fixes_the_first_quarter_and_commands_run_back_to_back(spark, tmp_path):
    home = tmp_path / "home"
    done = shell(readme_demo_line(), home)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "demo.flights: created (336,776 rows)" in done.stdout
    run_id = done.stdout.split("run ID: ")[1].split()[0]
    assert f"run {run_id}: published 90 partitions (24,538 rows) into demo.daily_route_delays as version 1 (was 0)" \
        in done.stdout

    warehouse = home.resolve() / "warehouse" / "demo.db"
    daily, monthly = warehouse / "daily_route_delays", warehouse / "monthly_route_delays"
    flights = spark.read.format("delta").load(str(warehouse / "flights"))
    # flight_date is the New York date of the scheduled departure: it must agree with year/month/day
    assert flights.where("flight_date <> make_date(year, month, day)").count() == 0
    q1, later = "flight_date < DATE'2013-04-01'", "flight_date >= DATE'2013-04-01'"
    version = lambda path, v: spark.read.format("delta").option("versionAsOf", v).load(str(path))  # noqa: E731
    assert version(daily, 0).where(q1).select(*COLUMNS).exceptAll(
        independent_daily(spark, flights, q1)).count() > 1000  # the defect was real
    assert_df_equality(version(daily, 1).where(q1).select(*COLUMNS), independent_daily(spark, flights, q1),
                       ignore_row_order=True, ignore_nullable=True, allow_nan_equality=True)
    assert_df_equality(version(daily, 1).where(later), version(daily, 0).where(later), ignore_row_order=True)
    assert (last_commit(spark, daily)["version"], json.loads(last_commit(spark, daily)["userMetadata"])["run_id"]) \
        == (1, run_id)
    # the downstream mart: January to March recomputed from the fixed daily rows, under the same run ID
    assert_df_equality(version(monthly, 1).where("month < DATE'2013-04-01'"),
                       independent_monthly(independent_daily(spark, flights, q1)),
                       ignore_row_order=True, ignore_nullable=True)
    assert json.loads(last_commit(spark, monthly)["userMetadata"])["run_id"] == run_id

    # safe to run twice; the release rolls back as one unit
    again = shell(f"backfill demo && backfill rollback {run_id} --by demo-test --reason 'check the rollback'", home)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "demo.flights: kept" in again.stdout
    for path in (daily, monthly):
        assert last_commit(spark, path)["operation"] == "RESTORE"
        assert_df_equality(spark.read.format("delta").load(str(path)), version(path, 0),
                           ignore_row_order=True, allow_nan_equality=True)

    # each command typed right after the one before finds the home free (its JVM let go of Derby's lock)
    pairs = " && ".join([f"backfill plan {REQUEST} >/dev/null && backfill status >/dev/null"] * 3)
    back_to_back = shell(f"set -e; {pairs}; echo all-exited-0", home)
    assert (back_to_back.returncode, back_to_back.stdout.strip(), back_to_back.stderr) == (0, "all-exited-0", "")
