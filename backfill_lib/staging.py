"""Staging tables: where a run writes the rows of each partition batch before anything is published.

One staging Delta table per run and target: the target's columns plus ``_backfill_batch`` (INT, the plan's batch
index), partitioned by ``_backfill_batch`` rather than by the target's partition column. A batch is written with
``replaceWhere`` on its batch partition *and* its target partitions, so a retried or resumed batch replaces its
rows and never appends, and a source row outside the batch's partitions fails the write.

Why by batch: a batch then writes one or a few files instead of one file per target partition (365 tiny files
for a year of days), and every audit of the staged rows (GX, reconciliation, diff, checksum) opens those few
files. Concurrent batches still never conflict, because each one's ``replaceWhere`` reads only its own batch
partition (Delta checks conflicts by partition values). Publishing writes the target's partitioning once.
Read staged rows with :func:`staged_rows`, which drops the batch column.
"""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.storagelevel import StorageLevel

from backfill_lib.errors import SchemaMismatchError, StrayRowsError
from backfill_lib.partition_keys import PartitionKeys
from backfill_lib.plan import BackfillPlan, Batch
from backfill_lib.schema_guard import ColumnCast
from backfill_lib.tables import Column

#: The staging table's partition column: the plan's batch index (INT). Not a column of the target.
BATCH_COLUMN = "_backfill_batch"


def ensure_staging_table(spark: SparkSession, plan: BackfillPlan, columns: tuple[Column, ...]) -> None:
    """Create the run's staging table (target columns plus ``_backfill_batch``, partitioned by it) when it does
    not exist yet.

    Raises
    ------
    SchemaMismatchError
        When the staging table exists without ``_backfill_batch`` (staged by an earlier delta-backfill,
        partitioned like the target); nothing is created or written. A column of that name in the target or the
        source is refused earlier, by :func:`check_reserved_column` at intake.
    """
    from delta.tables import DeltaTable

    if spark.catalog.tableExists(plan.staging_table) and BATCH_COLUMN not in spark.table(plan.staging_table).columns:
        raise SchemaMismatchError(
            f"staging table {plan.staging_table} has no {BATCH_COLUMN} column (staged by an earlier delta-backfill): "
            f"run {plan.run_id} cannot continue in it; start a new run of the request"
        )
    schema = plan.staging_table.rsplit(".", 1)[0]
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    builder = DeltaTable.createIfNotExists(spark).tableName(plan.staging_table)
    for col in columns:
        builder = builder.addColumn(col.name, col.type, nullable=col.nullable)
    builder = builder.addColumn(BATCH_COLUMN, "INT", nullable=False)
    builder.partitionedBy(BATCH_COLUMN).property("delta.appendOnly", "false").execute()


def check_reserved_column(target_table: str, target: tuple[Column, ...], source_sql: str,
                          source: tuple[Column, ...]) -> None:
    """Refuse a target or source column named ``_backfill_batch`` (the staging table's partition column).

    Raises
    ------
    SchemaMismatchError
        Naming the target table, or the source SQL, that has the column.
    """
    for where, columns, fix in ((target_table, target, "the target"), (source_sql, source, "the source SQL")):
        if any(c.name.lower() == BATCH_COLUMN for c in columns):
            raise SchemaMismatchError(
                f"{where}: column {BATCH_COLUMN} is reserved for the staging table's batch partition; "
                f"rename it in {fix}"
            )


def staged_rows(spark: SparkSession, staging_table: str) -> DataFrame:
    """The rows staged in ``staging_table``, with the target's columns only (``_backfill_batch`` dropped)."""
    return spark.table(staging_table).drop(BATCH_COLUMN)


def aligned(df: DataFrame, casts: tuple[ColumnCast, ...]) -> DataFrame:
    """``df`` with the target's columns in the target's order, widened columns cast explicitly."""
    return df.select([F.col(c.name).cast(c.type).alias(c.name) if c.cast else F.col(c.name) for c in casts])


def _stray_partitions(df: DataFrame, keys: PartitionKeys, predicate: str) -> list[tuple[str, int]]:
    outside = df.where(f"NOT coalesce({predicate}, false)")
    rows = outside.groupBy(keys.expr().alias("p")).count().orderBy("p").collect()
    return [(keys.key(r["p"]) if r["p"] is not None else "NULL", int(r["count"])) for r in rows]


def stage_batch(spark: SparkSession, plan: BackfillPlan, batch: Batch, df: DataFrame) -> dict[str, int]:
    """Write ``df`` into the staging table as batch ``batch.index``, replacing that batch's earlier rows; return
    rows per partition key.

    ``df`` is persisted (memory, spilling to disk) for the write and one grouped count of the very rows written,
    so the source runs once and the count needs no read of the staging table (whose new version a read would first
    have to load: four more Spark jobs). A planned partition the source left empty counts 0 rows.

    Raises
    ------
    StrayRowsError
        When ``df`` holds rows outside the batch's partitions (Delta's ``replaceWhere`` check refuses the
        write); the message names the first offending partitions and their row counts. Nothing is written.
    """
    predicate = plan.batch_predicate(batch)
    in_batch = f"{BATCH_COLUMN} = {batch.index}"
    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        try:
            # writeTo(...).overwrite(condition) is Delta's replaceWhere, without saveAsTable's catalog rewrite.
            (
                df.withColumn(BATCH_COLUMN, F.lit(batch.index).cast("int"))
                .writeTo(plan.staging_table)
                .overwrite(F.expr(f"{in_batch} AND ({predicate})"))
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
        keys = plan.partition_keys
        counted = df.groupBy(keys.expr().alias("p")).count().collect()
    finally:
        df.unpersist()
    rows = keys.rekey({r["p"]: int(r["count"]) for r in counted})
    return {key: rows.get(key, 0) for key in batch.keys}
