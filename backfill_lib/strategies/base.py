"""What every strategy provides, and the staging and verification most of them share."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import DataFrame, SparkSession

from backfill_lib.adapters.pool import in_pool
from backfill_lib.adapters.session import case_sensitive
from backfill_lib.core.checks import Check
from backfill_lib.core.partitions import key_order
from backfill_lib.core.table_state import Column
from backfill_lib.intake.schema_guard import ColumnCast, align
from backfill_lib.plan.model import BackfillPlan, Batch
from backfill_lib.run.staging import StagingTable, check_reserved_column, stage_batch
from backfill_lib.publish.commit import Written
from backfill_lib.strategies.commit_check import verify_commit
from backfill_lib.plan.kinds import StrategyKind
from backfill_lib.validate.fingerprints import partition_fingerprints, staged_fingerprints


class StrategyImpl(StrategyKind):
    """A strategy's Spark side: ``align_source`` and ``check_batch`` before staging, ``stage``, ``diff_scope`` for
    validation, ``publish``, ``verify``; its traits and ``describe`` come from its :class:`StrategyKind`.

    The default stages a batch with ``replaceWhere`` on its partitions (recompute and patch).
    """

    def align_source(self, plan: BackfillPlan, columns: tuple[Column, ...], at: str) -> tuple[ColumnCast, ...]:
        """How the source's ``columns`` (from the SQL file ``at``) are cast to the target's; raise
        :class:`~backfill_lib.core.errors.IntakeError` (or its ``SchemaMismatchError``) naming ``at`` and the
        column when they cannot be. Default: the staging reserved column is absent, and the columns align with
        the target's (only the evolutions :func:`~backfill_lib.intake.schema_guard.align` allows; a generated column
        of the target the source omits is computed by its expression; an IDENTITY one must be supplied)."""
        check_reserved_column(plan.target_table, plan.target_columns, at, columns)
        generated = {g.name: g.expression for g in plan.target_generated}
        return align(columns, plan.target_columns, at, plan.request.keys, generated,
                     case_sensitive=case_sensitive(),
                     identity={c.name for c in plan.target_identity})

    def diff_scope(self, plan: BackfillPlan, current: DataFrame, staged: DataFrame) -> DataFrame:
        """The target rows the diff compares ``staged`` with, from ``current`` (the target's rows in the range at
        the planned version). Default: all of them."""
        return current

    def check_batch(self, plan: BackfillPlan, batch: Batch, df: DataFrame) -> None:
        """Raise a :class:`~backfill_lib.core.errors.BackfillError` when ``df`` must not be staged. Default: accept."""

    def stage(self, spark: SparkSession, plan: BackfillPlan, batch: Batch, df: DataFrame, staging: StagingTable | None,
              before_write: Callable[[], None]) -> dict[str, int]:
        """Write ``df`` into ``staging`` for ``batch``, calling ``before_write`` just before the first row is written;
        return staged rows per partition key."""
        return stage_batch(plan, batch, df, staging, before_write)

    def write(self, spark: SparkSession, plan: BackfillPlan, casts: tuple[ColumnCast, ...], pre: int) -> Written | None:
        """The one commit on the target, which the fence found at version ``pre``; return what it wrote, observed
        as it was written (``None`` when the strategy does not observe it). Called only through
        :func:`~backfill_lib.publish.commit.publish_commit`, which fences first and finds the version after."""
        raise NotImplementedError

    def verify(self, spark: SparkSession, plan: BackfillPlan, version: int,
               staged: dict[str, tuple[int, object]] | None = None, wrote: Written | None = None) -> list[Check]:
        """Post-publish checks of ``version`` against staging; ``staged`` are the staged rows'
        :func:`partition_fingerprints` when the run already computed them (else they are computed here).

        With both ``staged`` and ``wrote`` (what this process's publish observed), the checks come from the
        Delta log (:func:`verify_commit`, no data read); otherwise, or when those cannot all pass, the range of
        ``version`` is read back and compared partition by partition (:func:`verify_partitions`)."""
        if staged is not None and wrote is not None:
            checks = verify_commit(spark, plan, version, staged, wrote)
            if checks is not None:
                return checks
        return verify_partitions(spark, plan, version, plan.predicate(), staged)


def verify_partitions(spark: SparkSession, plan: BackfillPlan, version: int, predicate: str | None,
                      staged: dict[str, tuple[int, object]] | None = None) -> list[Check]:
    """Row count and checksum per partition of the published ``version`` (read back from the table) versus
    staging, within ``predicate`` (``None``: the whole table). Partitions present on either side are compared.
    ``staged`` are :func:`staged_fingerprints` computed earlier (staging does not change once validated);
    without them both sides are read here, at once."""
    published_df = spark.read.option("versionAsOf", version).table(plan.target_table)
    if predicate is not None:
        published_df = published_df.where(predicate)
    with ThreadPoolExecutor(2, thread_name_prefix=f"{plan.run_id}-verify") as pool:  # two independent scans
        published_read = pool.submit(in_pool, spark, partition_fingerprints, published_df, plan.partition_keys)
        staged_read = None if staged is not None else pool.submit(in_pool, spark, staged_fingerprints, spark, plan, predicate)
        published = published_read.result()
        staged = staged if staged_read is None else staged_read.result()
    checks = []
    keys = set(published) | set(staged)
    if predicate is not None:  # a planned partition that is empty on both sides is still reported
        keys |= {p.key for p in plan.partitions}
    for key in sorted(keys, key=key_order):
        a, b = published.get(key, (0, None)), staged.get(key, (0, None))
        ok = a == b
        checks.append(
            Check("post_publish", "rows_and_checksum_equal_staging", ok, key, None,
                  f"{a[0]} rows, checksum {a[1]}", f"{b[0]} rows, checksum {b[1]}",
                  None if ok else f"published {a[0]} rows (checksum {a[1]}), staged {b[0]} rows (checksum {b[1]})")
        )
    return checks
