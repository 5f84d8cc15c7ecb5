"""A Delta MERGE as SQL, for sessions without Delta's Python ``DeltaTable`` (Spark Connect).

``delta.tables.DeltaTable`` needs the driver's JVM, or under Spark Connect Delta's own Connect server plugin
(``io.delta:delta-connect-server``), which a Connect server (Databricks serverless among them) may not load.
``MERGE INTO`` reaches the server's Delta SQL extension on every Connect server; the staged rows are a temporary
view of this session for the statement's duration.
"""

from __future__ import annotations

import uuid

from pyspark.sql import DataFrame, SparkSession


def merge_with_sql(spark: SparkSession, target: str, staged: DataFrame, on: str, clauses: list[str],
                   schema_evolution: bool = False) -> None:
    """Run ``MERGE [WITH SCHEMA EVOLUTION] INTO target t USING <staged> s ON on <clauses>`` (each clause a
    ``WHEN ...`` text naming the target ``t`` and the source ``s``), one Delta commit; the commit's session confs
    (userMetadata, idempotent-write guard) are the caller's."""
    view = f"__bf_merge_{uuid.uuid4().hex[:12]}"
    staged.createOrReplaceTempView(view)
    evolution = "WITH SCHEMA EVOLUTION " if schema_evolution else ""
    try:
        spark.sql(f"MERGE {evolution}INTO {target} t USING {view} s ON {on} " + " ".join(clauses))
    finally:
        spark.catalog.dropTempView(view)
