"""Staging tables: where a run writes the rows of each partition batch before anything is published.

One staging Delta table per run and target, with the target's schema and partitioning. A batch is written with
``replaceWhere`` on exactly its partitions, so a retried or resumed batch replaces its rows and never appends.
"""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_lib.errors import StrayRowsError
from backfill_lib.partition_keys import PartitionKeys
from backfill_lib.plan import BackfillPlan, Batch, stats_by_key
from backfill_lib.schema_guard import ColumnCast
from backfill_lib.tables import Column, partition_stats


def ensure_staging_table(spark: SparkSession, plan: BackfillPlan, columns: tuple[Column, ...]) -> None:
    """Create the run's staging table (target schema, same partition column) when it does not exist yet."""
    from delta.tables import DeltaTable

    schema = plan.staging_table.rsplit(".", 1)[0]
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    builder = DeltaTable.createIfNotExists(spark).tableName(plan.staging_table)
    for col in columns:
        builder = builder.addColumn(col.name, col.type, nullable=col.nullable)
    builder.partitionedBy(plan.partition_column).property("delta.appendOnly", "false").execute()


def aligned(df: DataFrame, casts: tuple[ColumnCast, ...]) -> DataFrame:
    """``df`` with the target's columns in the target's order, widened columns cast explicitly."""
    return df.select([F.col(c.name).cast(c.type).alias(c.name) if c.cast else F.col(c.name) for c in casts])


def _stray_partitions(df: DataFrame, keys: PartitionKeys, predicate: str) -> list[tuple[str, int]]:
    outside = df.where(f"NOT coalesce({predicate}, false)")
    rows = outside.groupBy(keys.expr().alias("p")).count().orderBy("p").collect()
    return [(keys.key(r["p"]) if r["p"] is not None else "NULL", int(r["count"])) for r in rows]


def stage_batch(spark: SparkSession, plan: BackfillPlan, batch: Batch, df: DataFrame) -> dict[str, int]:
    """Write ``df`` into the staging table, replacing exactly ``batch``'s partitions; return rows per partition.

    Row counts come from the staging table's Delta log (``numRecords`` of the files written), not a rescan.
    A planned partition the source left empty counts 0 rows.

    Raises
    ------
    StrayRowsError
        When ``df`` holds rows outside the batch's partitions (Delta's ``replaceWhere`` check refuses the
        write); the message names the first offending partitions and their row counts. Nothing is written.
    """
    predicate = plan.batch_predicate(batch)
    try:
        (
            df.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", predicate)
            .saveAsTable(plan.staging_table)
        )
    except AnalysisException as exc:
        if "DELTA_REPLACE_WHERE_MISMATCH" not in str(exc):
            raise
        stray = _stray_partitions(df, plan.partition_keys, predicate)
        listed = ", ".join(f"{p} ({n} row{'' if n == 1 else 's'})" for p, n in stray[:5])
        more = f" and {len(stray) - 5} more" if len(stray) > 5 else ""
        raise StrayRowsError(
            f"source {plan.request.source.sql} produced rows outside batch {batch.index} "
            f"[{batch.keys[0]} .. {batch.keys[-1]}] of {plan.target_table}: partition {listed}{more}; nothing written"
        ) from exc
    location = spark.sql(f"DESCRIBE DETAIL {plan.staging_table}").collect()[0]["location"]
    target = plan.request.target
    stats = stats_by_key(partition_stats(spark, location, plan.partition_column), target.grain, plan.request.time_zone)
    return {key: (stats[key].rows or 0) if key in stats else 0 for key in batch.keys}
