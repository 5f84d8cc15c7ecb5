"""Metric reconciliation: a metric of the staged rows equals a metric of the source, per partition.

Both sides are SQL aggregate expressions grouped by their partition column over the same half-open range.
Values are compared as Python ``int`` or ``decimal.Decimal`` (what Spark returns for integer and decimal
aggregates), so no rounding through floating point hides a difference.
"""

from __future__ import annotations

from decimal import Decimal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_lib.ledger import Check
from backfill_lib.partition_keys import PartitionKeys, keys_of
from backfill_lib.partitions import range_predicate
from backfill_lib.plan import BackfillPlan, Batch
from backfill_lib.request import ReconciliationRule
from backfill_lib.staging import staged_rows


def metric_per_partition(df: DataFrame, column: str | PartitionKeys, metric: str) -> dict[str, object]:
    """``metric`` (a SQL aggregate expression) of ``df`` per partition, keyed by plan key (see
    :mod:`backfill_lib.partition_keys`; a bare column name is a ``DATE`` keyed ``YYYY-MM-DD``)."""
    keys = keys_of(column)
    rows = df.groupBy(keys.expr().alias("p")).agg(F.expr(metric).alias("m")).collect()
    return keys.rekey({r["p"]: r["m"] for r in rows})


def _per_partition(df: DataFrame, keys: PartitionKeys, metric: str, predicate: str | None) -> dict[str, object]:
    return metric_per_partition(df if predicate is None else df.where(predicate), keys, metric)


def _differs(staged: object, source: object, tolerance: float) -> bool:
    if staged is None or source is None:
        return staged is not source
    if tolerance == 0:
        return staged != source
    return abs(Decimal(str(staged)) - Decimal(str(source))) > Decimal(str(tolerance))


def source_metric(
    spark: SparkSession, plan: BackfillPlan, batch: Batch, rule: ReconciliationRule, whole_table: bool = False
) -> dict[str, object]:
    """``rule.source.metric`` per partition of the source over ``batch``'s half-open range (the whole source
    with ``whole_table``), keyed like the plan's partitions. Reads only the source, so it may run while staging."""
    src = rule.source
    predicate = None if whole_table else range_predicate(src.partition_column, batch.start, batch.end)
    return _per_partition(spark.table(src.table), plan.partition_keys.of(src.partition_column), src.metric, predicate)


def reconcile_batch(
    spark: SparkSession, plan: BackfillPlan, batch: Batch, rule: ReconciliationRule, whole_table: bool = False,
    source: dict[str, object] | None = None,
) -> list[Check]:
    """Compare ``rule.metric`` on staged rows with ``rule.source.metric`` on the source for each partition.

    A partition missing on one side has metric ``None`` there, which matches only a missing partition on the
    other side. Returns one check per planned partition of ``batch``; with ``whole_table`` (a rebuild), both
    tables are read whole and every partition either side has is compared. ``source`` is the rule's
    :func:`source_metric` when already read (else it is read here).
    """
    staged_pred = None if whole_table else plan.batch_predicate(batch)
    staged = _per_partition(staged_rows(spark, plan.staging_table), plan.partition_keys, rule.metric, staged_pred)
    if source is None:
        source = source_metric(spark, plan, batch, rule, whole_table)
    src = rule.source
    keys = sorted(set(staged) | set(source)) if whole_table else batch.keys
    checks = []
    for key in keys:
        a, b = staged.get(key), source.get(key)
        ok = not _differs(a, b, rule.tolerance)
        message = None if ok else f"staged {rule.metric} = {a}, source {src.table} {src.metric} = {b}"
        checks.append(Check("reconciliation", rule.name, ok, key, batch.index, str(a), str(b), message))
    return checks
