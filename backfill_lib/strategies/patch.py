"""patch: corrected rows for given keys; publish is one MERGE on the null-safe keys plus the range literal.

Duplicate source keys would make the MERGE fail (or update a row twice): validation refuses them for every
strategy (:mod:`backfill_lib.validate.key_audit`), before publishing."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_lib.adapters.checksums import comparable
from backfill_lib.adapters.log_reader import log_reader
from backfill_lib.core.checks import Check
from backfill_lib.core.errors import IntakeError
from backfill_lib.core.partitions import quote_ident
from backfill_lib.core.table_state import Column
from backfill_lib.intake.schema_guard import ColumnCast
from backfill_lib.plan.model import BackfillPlan
from backfill_lib.publish.commit import check_fence, find_version, idempotent_commit
from backfill_lib.run.staging import staged_rows
from backfill_lib.strategies.base import StrategyImpl
from backfill_lib.strategies.changes_only import differs
from backfill_lib.strategies.commit_check import Published
from backfill_lib.strategies.kinds import PatchKind
from backfill_lib.strategies.sql_merge import merge_with_sql


class Patch(PatchKind, StrategyImpl):
    def align_source(self, plan: BackfillPlan, columns: tuple[Column, ...], where: str) -> tuple[ColumnCast, ...]:
        """As the default; and an IDENTITY column of the target must be one of the keys: the MERGE sets every other
        column of a matched row, and Delta refuses to update an IDENTITY column (``where`` names the source).

        Raises
        ------
        IntakeError
            Naming the table and the IDENTITY column that is no key; nothing is written."""
        casts = super().align_source(plan, columns, where)
        for c in plan.target_identity:
            if c.name not in plan.request.keys:
                raise IntakeError(
                    f"{where}: table {plan.target_table} column {c.name} is an IDENTITY column ({c.label}): a patch's "
                    "MERGE updates every column of a matched row but its keys, and Delta refuses to update an "
                    f"IDENTITY column; add {c.name} to keys, or use strategy recompute")
        return casts

    def diff_scope(self, plan: BackfillPlan, current, staged):
        """Only the target's rows with a staged key: a patch stages corrected rows for some keys and keeps every
        other row (unless ``delete_missing``, where the keys it does not stage are deleted)."""
        if plan.request.delete_missing:
            return current
        keys = [quote_ident(k) for k in plan.request.keys]  # quoted: a name may hold a dot
        return current.join(staged.select(*keys), [current[k].eqNullSafe(staged[k]) for k in keys], "left_semi")

    def publish(self, spark: SparkSession, plan: BackfillPlan, casts: tuple[ColumnCast, ...]) -> Published:
        """One MERGE: update matched rows whose values differ, insert new keys, optionally delete missing ones."""
        from delta.tables import DeltaTable

        pre = check_fence(spark, plan)
        columns = [c.name for c in casts]
        staged = (staged_rows(spark, plan.staging_table).where(plan.predicate())
                  .select(*[F.col(quote_ident(c)) for c in columns]))
        values = [c for c in columns if c not in plan.request.keys]
        # as the diff and changes_only compare (a float's 0.0 and -0.0 differ), so what the diff counts updated is
        # what the MERGE updates
        changed = " OR ".join(differs(c, staged.schema[c].dataType, False) for c in values) or "false"
        if not log_reader(spark).delta_table_api:  # no DeltaTable without a JVM: the same MERGE as SQL
            sets = ", ".join(f"t.{quote_ident(c)} = s.{quote_ident(c)}" for c in values)
            names = ", ".join(quote_ident(c) for c in columns)
            clauses = ([f"WHEN MATCHED AND ({changed}) THEN UPDATE SET {sets}"] if values else []) + [
                f"WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({', '.join(f's.{quote_ident(c)}' for c in columns)})"]
            if plan.request.delete_missing:
                clauses.append(f"WHEN NOT MATCHED BY SOURCE AND ({plan.predicate(qualifier='t')}) THEN DELETE")
            with idempotent_commit(spark, plan):
                merge_with_sql(spark, plan.target_table, staged, self.merge_condition(plan), clauses)
            return Published(pre, find_version(spark, plan.target_table, plan.commit_run_id, "publish", pre))
        merge = (
            DeltaTable.forName(spark, plan.target_table)
            .alias("t")
            .merge(staged.alias("s"), self.merge_condition(plan))
            .whenMatchedUpdate(condition=changed, set={quote_ident(c): f"s.{quote_ident(c)}" for c in values})
            .whenNotMatchedInsert(values={quote_ident(c): f"s.{quote_ident(c)}" for c in columns})
        )
        if plan.request.delete_missing:
            merge = merge.whenNotMatchedBySourceDelete(condition=plan.predicate(qualifier="t"))
        with idempotent_commit(spark, plan):
            merge.execute()
        return Published(pre, find_version(spark, plan.target_table, plan.commit_run_id, "publish", pre))

    def verify(self, spark: SparkSession, plan: BackfillPlan, version: int, staged=None, wrote=None) -> list[Check]:
        """Every staged row is present in the published version as staged (and, with ``delete_missing``, no
        published row in range lacks a staged key). Compares rows, so ``staged`` fingerprints are not used."""
        predicate = plan.predicate()
        staged = staged_rows(spark, plan.staging_table).where(predicate)
        published = spark.read.option("versionAsOf", version).table(plan.target_table).where(predicate)
        published = published.select(*[F.col(quote_ident(c)) for c in staged.columns])
        # canonical forms: a MAP or VARIANT column cannot go through exceptAll as it is
        missing = comparable(staged).exceptAll(comparable(published)).count()
        checks = [Check("post_publish", "staged_rows_present", missing == 0, None, None, f"{missing} rows missing", "0",
                        None if missing == 0 else f"{missing} staged rows are not in version {version} as staged")]
        if plan.request.delete_missing:
            on = [published[quote_ident(k)].eqNullSafe(staged[quote_ident(k)]) for k in plan.request.keys]
            extra = published.join(staged, on, "left_anti").count()
            checks.append(Check("post_publish", "no_rows_beyond_staged_keys", extra == 0, None, None, f"{extra} rows", "0",
                                None if extra == 0 else f"{extra} published rows in range have keys the source lacks"))
        return checks
