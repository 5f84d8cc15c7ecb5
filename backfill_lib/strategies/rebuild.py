"""rebuild: re-create the whole table from the source; publish swaps it in with one commit that keeps history."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from backfill_lib.adapters.delta_log import partition_stats
from backfill_lib.adapters.session import session_time_zone
from backfill_lib.core.checks import Check
from backfill_lib.core.table_state import Column
from backfill_lib.intake.schema_guard import ColumnCast, check_schema_changes, schema_changes
from backfill_lib.intake.table_checks import check_columns_fit
from backfill_lib.plan.model import BackfillPlan, Batch
from backfill_lib.publish.commit import check_fence, find_version, idempotent_commit
from backfill_lib.run.staging import staging_properties
from backfill_lib.strategies.base import StrategyImpl, verify_partitions
from backfill_lib.strategies.commit_check import Published
from backfill_lib.strategies.kinds import RebuildKind, layout_clause

#: Table properties Delta maintains and refuses to be given: the highest column ID of a column-mapped table
#: (``DELTA_CANNOT_MODIFY_TABLE_PROPERTY``) and the hidden columns a table with row tracking materializes its row
#: IDs and commit versions in (``DELTA_UNKNOWN_CONFIGURATION``; Delta keeps them across the swap itself, Delta 4.4).
DELTA_OWNED_PROPERTIES = ("delta.columnMapping.maxColumnId", "delta.rowTracking.materializedRowIdColumnName",
                          "delta.rowTracking.materializedRowCommitVersionColumnName")


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Rebuild(RebuildKind, StrategyImpl):
    def align_source(self, plan: BackfillPlan, columns: tuple[Column, ...], where: str) -> tuple[ColumnCast, ...]:
        """A rebuild may change the schema: its source only has to provide the partition column (of the grain's
        type) and the keys; its columns are taken as they are. A change that can lose values or names (a
        narrowed, retyped, dropped or renamed column) needs ``schema_changes: allow`` in the request.

        Raises
        ------
        IntakeError
            A missing partition column or key (naming ``where``); ``SchemaMismatchError`` listing every change that
            needs ``schema_changes: allow`` when the request does not allow them. Nothing is written."""
        check_columns_fit(f"{where}: the source", columns, plan.request, data_column=plan.range_in_data)
        check_schema_changes(schema_changes(columns, plan.target_columns), plan.request.schema_changes == "allow",
                             plan.request_path, plan.target_table)
        return tuple(ColumnCast(c.name, c.type, False) for c in columns)

    def stage(self, spark: SparkSession, plan: BackfillPlan, batch: Batch, df: DataFrame, staging=None,
              before_write=lambda: None) -> dict[str, int]:
        """Create the staging table from the whole source (it is the run's own table, so replacing it is scoped).

        ``df`` was analysed in the run's time zone; it is written in the plan's ``write_time_zone`` because the
        staging table is partitioned by the plan's column (see :attr:`BackfillPlan.write_time_zone`)."""
        properties = staging_properties(spark, plan.target_table)  # column mapping, as the target's
        tblprops = ""
        if properties:
            tblprops = " TBLPROPERTIES (" + ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in properties.items()) + ")"
        # SQL rather than writeTo(...).partitionedBy(col): that re-parses the column's name, so a name with a space
        # (a column-mapped target's) fails to parse; here it is quoted.
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {plan.staging_table.rsplit('.', 1)[0]}")
        view = f"backfill_rebuild_{plan.run_id}"
        df.createOrReplaceTempView(view)
        try:
            before_write()
            with session_time_zone(spark, plan.write_time_zone, f"run {plan.run_id}"):
                spark.sql(f"CREATE OR REPLACE TABLE {plan.staging_table} USING delta"
                          f"{layout_clause(plan)}{tblprops} AS SELECT * FROM {view}")
        finally:
            spark.catalog.dropTempView(view)
        if plan.range_in_data:  # no partition values to count by: one aggregation of the staged rows
            keys = plan.partition_keys
            counted = spark.table(plan.staging_table).groupBy(keys.expr().alias("p")).count().collect()
            return {k: n for k, n in keys.rekey({r["p"]: int(r["count"]) for r in counted}).items() if k}
        return {k: (s.rows or 0) for k, s in partition_stats(spark, plan.staging_table, plan.partition_keys).items() if k}

    def publish(self, spark: SparkSession, plan: BackfillPlan, casts: tuple[ColumnCast, ...]) -> Published:
        """``CREATE OR REPLACE TABLE target ... AS SELECT * FROM staging`` keeping the table's properties."""
        pre = check_fence(spark, plan)
        properties = spark.sql(f"DESCRIBE DETAIL {plan.target_table}").first()["properties"] or {}
        # Delta keeps these itself (a column-mapped table's highest column ID, row tracking's hidden columns) and
        # refuses them as user properties.
        properties = {k: v for k, v in properties.items() if k not in DELTA_OWNED_PROPERTIES}
        tblprops = ""
        if properties:
            tblprops = " TBLPROPERTIES (" + ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in properties.items()) + ")"
        with idempotent_commit(spark, plan):
            spark.sql(
                f"CREATE OR REPLACE TABLE {plan.target_table} USING delta"
                f"{layout_clause(plan)}{tblprops} "
                f"AS SELECT * FROM {plan.staging_table}"
            )
        return Published(pre, find_version(spark, plan.target_table, plan.commit_run_id, "publish", pre))

    def verify(self, spark: SparkSession, plan: BackfillPlan, version: int, staged=None, wrote=None) -> list[Check]:
        """Every partition of the rebuilt table against staging (the whole table, not a range)."""
        return verify_partitions(spark, plan, version, None, staged)
