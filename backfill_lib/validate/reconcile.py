"""Metric reconciliation: a metric of the staged rows equals a metric of the source, per partition.

Both sides are SQL aggregate expressions grouped by their partition column over the same half-open range.
Values are compared by the one rule of :func:`~backfill_lib.validate.metrics.matches` (exact for integers and
decimals, NaN and NULL aware), as metric rules are, so no rounding through floating point hides a difference.
"""

from __future__ import annotations

from datetime import date

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_lib.adapters.delta_log import partition_stats
from backfill_lib.core.checks import Check
from backfill_lib.core.partition_keys import PartitionKeys, keys_of
from backfill_lib.core.partitions import range_predicate
from backfill_lib.intake.request import ReconciliationRule
from backfill_lib.plan.model import BackfillPlan, Batch
from backfill_lib.plan.source_pins import pinned_version, read_table, snapshot_at
from backfill_lib.run.staging import staged_rows
from backfill_lib.validate.metrics import matches


def metric_per_partition(df: DataFrame, column: str | PartitionKeys, metric: str) -> dict[str, object]:
    """``metric`` (a SQL aggregate expression) of ``df`` per partition, keyed by plan key (see
    :mod:`backfill_lib.core.partition_keys`; a bare column name is a ``DATE`` keyed ``YYYY-MM-DD``)."""
    keys = keys_of(column)
    rows = df.groupBy(keys.expr().alias("p")).agg(F.expr(metric).alias("m")).collect()
    return keys.rekey({r["p"]: r["m"] for r in rows})


def _per_partition(df: DataFrame, keys: PartitionKeys, metric: str, predicate: str | None) -> dict[str, object]:
    return metric_per_partition(df if predicate is None else df.where(predicate), keys, metric)


def source_metric(
    spark: SparkSession, plan: BackfillPlan, batch: Batch, rule: ReconciliationRule, whole_table: bool = False
) -> dict[str, object]:
    """``rule.source.metric`` per partition of the source over ``batch``'s half-open range (the whole source
    with ``whole_table``), keyed like the plan's partitions, at the version the run pinned the source at (see
    :mod:`backfill_lib.plan.source_pins`). Reads only the source, so it may run while staging.

    A ``count(*)`` of a Delta source partitioned by a ``DATE`` column comes from its Delta log (the live rows of
    each partition's files, :func:`~backfill_lib.adapters.delta_log.partition_stats`) instead of a scan, unless a file lacks
    statistics."""
    src = rule.source
    if not whole_table and src.metric.replace(" ", "").lower() in ("count(*)", "count(1)"):
        counted = logged_row_counts(spark, src.table, src.partition_column, batch.start, batch.end,
                                    pinned_version(spark, plan, src.table))
        if counted is not None:  # keyed YYYY-MM-DD: as the plan keys them (a string target's format)
            return plan.partition_keys.of_source(src.partition_column).rekey(counted)
    predicate = None if whole_table else range_predicate(src.partition_column, batch.start, batch.end)
    return _per_partition(read_table(spark, plan, src.table), plan.partition_keys.of_source(src.partition_column),
                          src.metric, predicate)


def logged_row_counts(spark: SparkSession, table: str, column: str, start, end,
                      version: int | None = None) -> dict[str, int] | None:
    """Rows per partition ``YYYY-MM-DD`` of Delta table ``table`` partitioned by ``DATE`` column ``column``, for
    partitions in ``[start, end)`` that hold rows, from its Delta log at ``version`` (default: the latest; no
    data read); ``None`` when ``table`` is not such a table, the bounds are not dates, or a file in range lacks
    ``numRecords`` statistics."""
    if type(start) is not date or type(end) is not date:  # a datetime is a date too: hour grains are scanned
        return None
    try:
        snapshot = snapshot_at(spark, table, version)
        field = next((f for f in snapshot.schema().fields() if f.name() == column), None)
        if field is None or field.dataType().typeName() != "date":
            return None
        if column not in list(spark.sparkContext._jvm.scala.jdk.javaapi.CollectionConverters.asJava(
                snapshot.metadata().partitionColumns())):
            return None
    except Exception:  # not a Delta table (a view, Parquet), or Delta's internal API changed shape: scan instead
        return None
    stats = partition_stats(spark, table, column, snapshot)
    counted = {v: s.rows for v, s in stats.items() if v is not None and start <= date.fromisoformat(v) < end}
    if any(n is None for n in counted.values()):
        return None
    return {v: n for v, n in counted.items() if n}


def reconcile_batch(
    spark: SparkSession, plan: BackfillPlan, batch: Batch, rule: ReconciliationRule, whole_table: bool = False,
    source: dict[str, object] | None = None, staged_df: DataFrame | None = None,
    staged_metric: dict[str, object] | None = None,
) -> list[Check]:
    """Compare ``rule.metric`` on staged rows with ``rule.source.metric`` on the source for each partition.

    A partition missing on one side has metric ``None`` there, which matches only a missing partition on the
    other side. Returns one check per planned partition of ``batch``; with ``whole_table`` (a rebuild), both
    tables are read whole and every partition either side has is compared. ``source`` is the rule's
    :func:`source_metric` when already read (else it is read here); ``staged_df`` the staged rows of ``batch``
    when the caller already holds them (else they are read from the staging table); ``staged_metric`` the staged
    side's metric per partition key when already aggregated (then no staged rows are read here).
    """
    if staged_metric is None:
        if staged_df is None:
            staged_df = staged_rows(spark, plan.staging_table)
            staged_df = staged_df if whole_table else staged_df.where(plan.batch_predicate(batch))
        staged_metric = metric_per_partition(staged_df, plan.partition_keys, rule.metric)
    staged = staged_metric
    if source is None:
        source = source_metric(spark, plan, batch, rule, whole_table)
    src = rule.source
    keys = sorted(set(staged) | set(source)) if whole_table else batch.keys
    checks = []
    for key in keys:
        a, b = staged.get(key), source.get(key)
        ok, diff = matches(a, b, rule.tolerance)
        message = None
        if not ok:
            message = f"staged {rule.metric} = {a}, source {src.table} {src.metric} = {b}"
            if diff is not None:
                message += f", difference {format(diff, 'f')}"
        checks.append(Check("reconciliation", rule.name, ok, key, batch.index, str(a), str(b), message))
    return checks
