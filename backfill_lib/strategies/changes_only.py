"""recompute with ``publish_mode: changes_only``: staged like a recompute, published by one MERGE that writes only
the rows that differ, so a target with the Change Data Feed on records real changes only.

The MERGE leaves the range exactly as the ``replaceWhere`` of a plain recompute would: it matches target and
staged rows on the null-safe keys plus the partition column, within the range literal; a matched row whose
columns all equal the staged row's is left as it is, any other is set to the staged row, a staged row without a
match is inserted, and a target row in range without one is deleted. That holds when each key occurs at most
once on each side, which is checked (both sides, one aggregation each) before the MERGE: a duplicate is refused,
naming the keys, and nothing is written.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType

from backfill_lib.adapters.checksums import canonical_sql, is_plain
from backfill_lib.adapters.log_reader import log_reader
from backfill_lib.core.checks import Check
from backfill_lib.core.errors import DuplicateKeyError, IntakeError, PublishError
from backfill_lib.core.partitions import quote_ident
from backfill_lib.core.table_state import Column
from backfill_lib.intake.schema_guard import ColumnCast
from backfill_lib.plan.model import BackfillPlan
from backfill_lib.publish.commit import check_fence, find_version, idempotent_commit
from backfill_lib.run.staging import staged_rows
from backfill_lib.strategies.base import verify_partitions
from backfill_lib.strategies.commit_check import Published
from backfill_lib.strategies.kinds import ChangesOnlyKind, merge_keys
from backfill_lib.strategies.recompute import Recompute
from backfill_lib.strategies.sql_merge import merge_with_sql
from backfill_lib.validate.key_audit import LISTED_KEYS, duplicate_keys, key_text


def differs(column: str, type_: str | DataType, new: bool) -> str:
    """SQL that is true when target row ``t`` and staged row ``s`` differ in ``column`` (NULL-safe).

    Floating-point columns compare their text, since ``<=>`` holds ``0.0`` equal to ``-0.0``, which the
    ``replaceWhere`` would still replace; a column the publish adds (``new``) differs wherever the staged value is
    not NULL (the target's rows get NULL there). Given as a :class:`DataType`, a nested or ``VARIANT`` column
    compares its canonical form (:func:`~backfill_lib.adapters.checksums.canonical_sql`: a ``MAP`` by its entries,
    floats inside by their sign of zero too), which ``<=>`` alone refuses for a ``MAP`` or ``VARIANT``."""
    q = quote_ident(column)
    if new:
        return f"s.{q} IS NOT NULL"
    if isinstance(type_, DataType):
        if not is_plain(type_):
            return f"NOT ({canonical_sql(f't.{q}', type_)} <=> {canonical_sql(f's.{q}', type_)})"
        type_ = type_.simpleString()
    if type_ in ("float", "double"):
        return f"NOT (CAST(t.{q} AS STRING) <=> CAST(s.{q} AS STRING))"
    return f"NOT (t.{q} <=> s.{q})"


class RecomputeChangesOnly(ChangesOnlyKind, Recompute):
    def align_source(self, plan: BackfillPlan, columns: tuple[Column, ...], where: str) -> tuple[ColumnCast, ...]:
        """As the default; and the target has no IDENTITY column: the MERGE sets every column of a changed row, and
        Delta refuses to update an IDENTITY column (``where`` names the source).

        Raises
        ------
        IntakeError
            Naming the table and the IDENTITY column; nothing is written."""
        casts = super().align_source(plan, columns, where)
        for c in plan.target_identity:
            raise IntakeError(
                f"{where}: table {plan.target_table} column {c.name} is an IDENTITY column ({c.label}): publish_mode "
                "changes_only publishes by a MERGE that updates every column of a changed row, and Delta refuses to "
                "update an IDENTITY column; use publish_mode: replace")
        return casts

    def publish(self, spark: SparkSession, plan: BackfillPlan, casts: tuple[ColumnCast, ...]) -> Published:
        """One MERGE of the staged range into the target, writing only the rows that differ (see the module
        docstring); it carries the run's ``userMetadata`` and Delta's idempotent-write guard. A column the schema
        guard found new is added in the same commit (MERGE schema evolution).

        Raises
        ------
        FenceError
            When a commit changed the range since the plan.
        DuplicateKeyError
            When a key occurs more than once in the staged range (names up to 5 keys and their counts).
        PublishError
            When a key occurs more than once in the target's range: the MERGE would set every copy to the
            staged row, where a replaceWhere keeps one.
        """
        from delta.tables import DeltaTable

        pre = check_fence(spark, plan)
        columns = [c.name for c in casts]
        keys = merge_keys(plan)
        staged = staged_rows(spark, plan.staging_table).where(plan.predicate()).select(*columns)
        current = spark.read.option("versionAsOf", pre).table(plan.target_table).where(plan.predicate())
        self._refuse_duplicates(plan, staged, current, keys, pre)
        in_range = plan.predicate(qualifier="t")
        on = self.merge_condition(plan)
        changed = " OR ".join(differs(c.name, c.type if c.new else staged.schema[c.name].dataType, c.new)
                              for c in casts if c.name not in keys) or "false"
        if not log_reader(spark).delta_table_api:  # no DeltaTable without a JVM: the same MERGE as SQL
            clauses = [f"WHEN MATCHED AND ({changed}) THEN UPDATE SET *", "WHEN NOT MATCHED THEN INSERT *",
                       f"WHEN NOT MATCHED BY SOURCE AND ({in_range}) THEN DELETE"]
            with idempotent_commit(spark, plan):
                merge_with_sql(spark, plan.target_table, staged, on, clauses,
                               schema_evolution=any(c.new for c in casts))
            return Published(pre, find_version(spark, plan.target_table, plan.commit_run_id, "publish", pre))
        merge = DeltaTable.forName(spark, plan.target_table).alias("t").merge(staged.alias("s"), on)
        if any(c.new for c in casts):
            merge = merge.withSchemaEvolution()
        merge = (merge.whenMatchedUpdateAll(condition=changed)
                 .whenNotMatchedInsertAll()
                 .whenNotMatchedBySourceDelete(condition=in_range))
        with idempotent_commit(spark, plan):
            merge.execute()
        return Published(pre, find_version(spark, plan.target_table, plan.commit_run_id, "publish", pre))

    def _refuse_duplicates(self, plan: BackfillPlan, staged: DataFrame, current: DataFrame, keys: tuple[str, ...],
                           version: int) -> None:
        listed = ", ".join(keys)
        dups = duplicate_keys(staged, keys)
        if dups:
            raise DuplicateKeyError(
                f"staging {plan.staging_table} has duplicate keys ({listed}) for {plan.target_table}: {_listed(dups)}; "
                "publish_mode changes_only needs each key once; nothing published")
        dups = duplicate_keys(current, keys)
        if dups:
            raise PublishError(
                f"table {plan.target_table} has duplicate keys ({listed}) in range at version {version}: "
                f"{_listed(dups)}; a changes_only MERGE would not replace them as a replaceWhere does; publish with "
                "publish_mode: replace; nothing published")

    def verify(self, spark: SparkSession, plan: BackfillPlan, version: int, staged=None, wrote=None) -> list[Check]:
        """The published range read back and compared with staging per partition (row count and checksum, as
        :func:`verify_partitions`): a MERGE's log entry holds only the files it rewrote, so it cannot show the
        whole range from the log as a replaceWhere's does."""
        return verify_partitions(spark, plan, version, plan.predicate(), staged)


def _listed(dups: list[tuple[tuple, int]]) -> str:
    more = " and more" if len(dups) > LISTED_KEYS else ""
    return "; ".join(f"{key_text(k)} ({n} times)" for k, n in dups[:LISTED_KEYS]) + more
