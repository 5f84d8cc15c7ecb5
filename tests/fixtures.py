"""Small real Delta tables and requests for the Spark tests."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.types import DateType, IntegerType, StructField, StructType

from tests.conftest import write_request

EVENTS_SCHEMA = StructType(
    [StructField("id", IntegerType(), False), StructField("dt", DateType(), True), StructField("v", IntegerType(), True)]
)
D8, D9, D10, D11 = date(2024, 3, 8), date(2024, 3, 9), date(2024, 3, 10), date(2024, 3, 11)

#: target: 2024-03-08 holds 2 rows, 2024-03-09 holds 3, 2024-03-10 holds 4
TARGET_ROWS = [(1, D8, 1), (2, D8, 2), (3, D9, 3), (4, D9, 4), (5, D9, 5), (6, D10, 6), (7, D10, 7), (8, D10, 8), (9, D10, 9)]

#: a source for recomputing 2024-03-08..10 of TARGET_ROWS: the same rows, each v times 10 once recomputed
FULL_SOURCE = [(1, D8, 10), (2, D8, 20), (3, D9, 30), (4, D9, 40), (5, D9, 50), (6, D10, 60), (7, D10, 70),
               (8, D10, 80), (9, D10, 90)]
#: the target after that recompute (the request's SQL multiplies v by 10)
FULL_EXPECTED = [(i, d, v * 10) for i, d, v in FULL_SOURCE]

SUITE = {
    "name": "events",
    "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}},
        {"type": "expect_compound_columns_to_be_unique", "kwargs": {"column_list": ["dt", "id"]}},
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "dt", "min_value": {"$PARAMETER": "range_start"}, "max_value": {"$PARAMETER": "range_last"}}},
    ],
}


def make_events(spark: SparkSession, db: str, source_rows: list[tuple]) -> None:
    """Create ``db.events`` (the target, TARGET_ROWS) and ``db.events_src`` (``source_rows``), both by ``dt``."""
    for name, rows in (("events", TARGET_ROWS), ("events_src", source_rows)):
        spark.createDataFrame(rows, EVENTS_SCHEMA).write.format("delta").partitionBy("dt").saveAsTable(f"{db}.{name}")


def events_request(tmp_path: Path, db: str, start: date = D9, end: date = D9, sql: str | None = None,
                   reconcile: bool = False, source_db: str | None = None, **extra) -> Path:
    """A recompute request for ``db.events`` from ``source_db.events_src`` (default ``db``; v multiplied by 10)."""
    sql_file = tmp_path / "events.sql"
    source = f"{source_db or db}.events_src"
    sql_file.write_text(sql or f"SELECT id, dt, v * 10 AS v FROM {source} WHERE dt >= :range_start AND dt < :range_end")
    suite = tmp_path / "events_suite.json"
    suite.write_text(json.dumps(SUITE))
    fields = {
        "owner": "ana@example.com",
        "reason": "TEST-1: recompute v",
        "target": {"table": f"{db}.events", "partition_column": "dt", "grain": "day"},
        "range": {"start": start.isoformat(), "end": end.isoformat()},
        "time_zone": "UTC",
        "strategy": "recompute",
        "source": {"sql": str(sql_file)},
        "keys": ["id"],
        "expectations": str(suite),
    }
    if reconcile:
        fields["reconciliation"] = [
            {"name": "rows_equal_source", "metric": "count(*)",
             "source": {"table": f"{db}.events_src", "partition_column": "dt", "metric": "count(*)"}}
        ]
    fields.update(extra)
    return write_request(tmp_path / "events.yml", **fields)


def make_monthly(spark: SparkSession, db: str) -> None:
    """Create the mart ``db.events_monthly`` (month DATE, n BIGINT rows, total BIGINT sum of v) from ``db.events``."""
    spark.sql(f"CREATE TABLE {db}.events_monthly USING delta PARTITIONED BY (month) AS "
              f"SELECT trunc(dt, 'MM') AS month, count(*) AS n, sum(v) AS total FROM {db}.events GROUP BY 1")


def with_mart(tmp_path: Path, db: str, **extra) -> Path:
    """:func:`events_request` plus the monthly mart ``db.events_monthly`` (rows and sum of v per month)."""
    sql = tmp_path / "monthly.sql"
    sql.write_text(f"SELECT trunc(dt, 'MM') AS month, count(*) AS n, sum(v) AS total FROM {db}.events "
                   "WHERE dt >= :range_start AND dt < :range_end GROUP BY trunc(dt, 'MM')")
    suite = tmp_path / "monthly.json"
    suite.write_text('{"name": "monthly", "expectations": [{"type": "expect_column_values_to_not_be_null", '
                     '"kwargs": {"column": "month"}}]}')
    mart = {"table": f"{db}.events_monthly", "partition_column": "month", "grain": "month", "sql": str(sql),
            "keys": ["month"], "expectations": str(suite)}
    return events_request(tmp_path, db, marts=[mart], **extra)
