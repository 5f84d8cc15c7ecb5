"""Staging an order-dependent target (``depends_on_past``): each batch reads the target as it will be.

A ``depends_on_past`` plan has one partition per batch (:func:`backfill_lib.plan.builder.build_plan`), staged in
order, one at a time (:class:`backfill_lib.run.batch_stager.BatchStager`). While batch N is staged, the source
SQL's references to the target (:mod:`backfill_lib.plan.past_reads`) read a temporary view of

- the rows this run staged for batches 0..N-1 (from the staging table, a Delta table: a resumed run reads what
  the crashed one staged), and
- the target's rows at the version the plan saw (``target_version``; repeatable, whatever commits land later) for
  every other partition (and, with ``target.where``, every row outside it),

so partition N reads the recomputed partition N-1, never the published one. The other tables of the SQL are read
at their pinned versions as usual.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_lib.core.partitions import quote_ident
from backfill_lib.plan.model import BackfillPlan, Batch
from backfill_lib.plan.past_reads import replace_target, target_references
from backfill_lib.plan.source_query import source_frame
from backfill_lib.run.staging import BATCH_COLUMN


def view_name(plan: BackfillPlan, batch: Batch) -> str:
    """The temporary view batch ``batch`` reads the target through: ``bf_past_<run_id>_<batch>`` (run IDs are
    letters, digits and underscores)."""
    return f"bf_past_{plan.run_id}_{batch.index}"


def target_as_staged(spark: SparkSession, plan: BackfillPlan, batch: Batch) -> DataFrame:
    """The target as it will be when ``batch`` is staged: the rows staged for the batches before it, and the
    target's rows at ``plan.target_version`` outside those batches' partitions (and ``where``), with the target's
    columns and types of that version. Lazy; reads nothing."""
    target = spark.sql(f"SELECT * FROM {plan.target_table} VERSION AS OF {int(plan.target_version)}")
    earlier = [p.partition for b in plan.batches[: batch.index] for p in b.partitions]
    if not earlier:
        return target
    replaced = plan.predicate(earlier)
    # coalesce: a row whose partition value is NULL is no staged partition's, so it stays
    kept = target.where(F.expr(f"NOT coalesce(({replaced}), false)"))
    staged = spark.table(plan.staging_table).where(F.col(BATCH_COLUMN) < batch.index)
    staged = staged.select([F.col(quote_ident(f.name)).cast(f.dataType).alias(f.name) for f in target.schema.fields])
    return kept.union(staged)


def past_source_frame(spark: SparkSession, plan: BackfillPlan, batch: Batch) -> DataFrame:
    """The source rows of ``batch`` (its half-open bounds bound to ``:range_start`` / ``:range_end``), with the
    SQL's references to the target reading :func:`target_as_staged` and its other tables at their pinned versions.

    Raises
    ------
    IntakeError
        When the SQL no longer names the target where it can be rewritten (see
        :func:`backfill_lib.plan.past_reads.check_past_reads`), or does not analyse.
    """
    from backfill_lib.core.errors import IntakeError

    view = view_name(plan, batch)
    target_as_staged(spark, plan, batch).createOrReplaceTempView(view)

    def rewrite(text: str) -> str:
        refs = target_references(spark, text, plan.target_table, plan.target_location)
        if not refs:  # checked at intake; the file changed since
            raise IntakeError(f"{plan.request.source.sql}: does not name the target {plan.target_table} directly, "
                              "so depends_on_past cannot redirect its reads to the staged partitions")
        return replace_target(text, refs, view)

    try:
        # analysed here (classic PySpark analyses eagerly), so the view's plan is part of the frame's
        return source_frame(spark, plan.request, batch.start, batch.end, versions=plan.pinned_versions,
                            rewrite=rewrite)
    finally:
        spark.catalog.dropTempView(view)
