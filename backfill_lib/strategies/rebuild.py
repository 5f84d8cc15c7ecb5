"""rebuild: re-create the whole table from the source; publish swaps it in with one commit that keeps history."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_lib.adapters.delta_log import (
    commit_actions,
    latest_snapshot,
    partition_stats,
    snapshot_identity_metadata,
)
from backfill_lib.adapters.session import session_time_zone
from backfill_lib.core.checks import Check
from backfill_lib.core.errors import IntakeError
from backfill_lib.core.partitions import quote_ident
from backfill_lib.core.table_state import (
    IDENTITY_HIGH_WATER_MARK_KEY,
    IDENTITY_START_KEY,
    IDENTITY_STEP_KEY,
    Column,
    identity_columns_of,
    synced_high_water_mark,
)
from backfill_lib.intake.schema_guard import ColumnCast, check_schema_changes, schema_changes
from backfill_lib.intake.table_checks import check_columns_fit
from backfill_lib.plan.model import BackfillPlan, Batch
from backfill_lib.publish.commit import Written, idempotent_commit
from backfill_lib.run.staging import staging_properties
from backfill_lib.strategies.base import StrategyImpl, verify_partitions
from backfill_lib.plan.kinds import RebuildKind, layout_clause

#: Table properties Delta maintains and refuses to be given: the highest column ID of a column-mapped table
#: (``DELTA_CANNOT_MODIFY_TABLE_PROPERTY``) and the hidden columns a table with row tracking materializes its row
#: IDs and commit versions in (``DELTA_UNKNOWN_CONFIGURATION``; Delta keeps them across the swap itself, Delta 4.4).
DELTA_OWNED_PROPERTIES = ("delta.columnMapping.maxColumnId", "delta.rowTracking.materializedRowIdColumnName",
                          "delta.rowTracking.materializedRowCommitVersionColumnName")


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Rebuild(RebuildKind, StrategyImpl):
    def align_source(self, plan: BackfillPlan, columns: tuple[Column, ...], at: str) -> tuple[ColumnCast, ...]:
        """A rebuild may change the schema: its source only has to provide the partition column (of the grain's
        type) and the keys; its columns are taken as they are. A change that can lose values or names (a
        narrowed, retyped, dropped or renamed column) needs ``schema_changes: allow`` in the request.

        An IDENTITY column of the target the source keeps stays one (:meth:`write`), so the source must yield it
        as a ``BIGINT`` (Delta would otherwise take the identity definition onto an ``INT`` column too).

        Raises
        ------
        IntakeError
            A missing partition column or key (naming ``at``); an IDENTITY column of another type than
            ``BIGINT``; ``SchemaMismatchError`` listing every change that needs ``schema_changes: allow`` when the
            request does not allow them. Nothing is written."""
        check_columns_fit(f"{at}: the source", columns, plan.request, data_column=plan.range_in_data)
        check_schema_changes(schema_changes(columns, plan.target_columns), plan.request.schema_changes == "allow",
                             plan.request_path, plan.target_table)
        for c in plan.target_identity:  # it stays an IDENTITY column, which Delta numbers as a BIGINT
            staged = next((s for s in columns if s.name == c.name), None)
            if staged is not None and staged.type != "bigint":
                raise IntakeError(
                    f"{at}: table {plan.target_table} column {c.name} is an IDENTITY column ({c.label}), which "
                    f"a rebuild keeps as one, and an IDENTITY column is BIGINT; the source yields it as "
                    f"{staged.type.upper()}: select CAST({c.name} AS BIGINT) AS {c.name}")
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

    def write(self, spark: SparkSession, plan: BackfillPlan, casts: tuple[ColumnCast, ...], pre: int) -> Written | None:
        """``CREATE OR REPLACE TABLE target ... AS SELECT * FROM staging`` keeping the table's properties, and its
        ``GENERATED BY DEFAULT AS IDENTITY`` columns (:func:`identity_kept`)."""
        properties = spark.sql(f"DESCRIBE DETAIL {plan.target_table}").first()["properties"] or {}
        # Delta keeps these itself (a column-mapped table's highest column ID, row tracking's hidden columns) and
        # refuses them as user properties.
        properties = {k: v for k, v in properties.items() if k not in DELTA_OWNED_PROPERTIES}
        tblprops = ""
        if properties:
            tblprops = " TBLPROPERTIES (" + ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in properties.items()) + ")"
        source, view = plan.staging_table, None
        staged = spark.table(plan.staging_table)
        identity = identity_kept(spark, plan, staged)
        if identity:
            view = f"backfill_rebuild_{plan.run_id}_identity"
            kept = [F.col(quote_ident(f.name)).alias(f.name, metadata=identity[f.name]) if f.name in identity
                    else F.col(quote_ident(f.name)) for f in staged.schema.fields]
            staged.select(*kept).createOrReplaceTempView(view)
            source = view
        try:
            with idempotent_commit(spark, plan):
                spark.sql(
                    f"CREATE OR REPLACE TABLE {plan.target_table} USING delta"
                    f"{layout_clause(plan)}{tblprops} "
                    f"AS SELECT * FROM {source}"
                )
        finally:
            if view is not None:
                spark.catalog.dropTempView(view)
        return None

    def verify(self, spark: SparkSession, plan: BackfillPlan, version: int, staged=None, wrote=None) -> list[Check]:
        """Every partition of the rebuilt table against staging (the whole table, not a range); and each IDENTITY
        column of the plan's target still one of ``version``, as defined before, with a high-water mark at or
        past every value published (:func:`identity_checks`)."""
        return verify_partitions(spark, plan, version, None, staged) + identity_checks(spark, plan, version)


def identity_kept(spark: SparkSession, plan: BackfillPlan, staged: DataFrame) -> dict[str, dict]:
    """``{column: field metadata}`` that keeps each ``GENERATED BY DEFAULT AS IDENTITY`` column of the target
    the staged rows hold an IDENTITY column through the rebuild's ``CREATE OR REPLACE TABLE ... AS SELECT``: the
    column's ``delta.identity.*`` metadata as the latest snapshot holds it (start, step, explicit inserts allowed),
    with the high-water mark Delta's ``SYNC IDENTITY`` would set after writing the staged values
    (:func:`~backfill_lib.core.table_state.synced_high_water_mark`): at least the old mark, so a row inserted
    later without the column gets a number neither handed out before nor staged. Delta 4.4 takes a query
    column's ``delta.identity.*`` metadata as the new table's identity definition, in the same one commit.

    One aggregation of the staged rows (each column's lowest and highest value); ``{}`` when the target has no
    IDENTITY column the staged rows keep, or under Spark Connect (its schema carries no Delta field metadata)."""
    names = [c.name for c in plan.target_identity if not c.always and c.name in staged.columns]
    if not names:
        return {}
    live = snapshot_identity_metadata(latest_snapshot(spark, plan.target_table))
    names = [n for n in names if n in live]
    if not names:
        return {}
    bounds = staged.agg(*[F.min(quote_ident(n)).alias(f"lo{i}") for i, n in enumerate(names)],
                        *[F.max(quote_ident(n)).alias(f"hi{i}") for i, n in enumerate(names)]).first()
    kept = {}
    for i, name in enumerate(names):
        metadata = dict(live[name])
        mark = metadata.get(IDENTITY_HIGH_WATER_MARK_KEY)
        mark = synced_high_water_mark(int(metadata[IDENTITY_START_KEY]), int(metadata[IDENTITY_STEP_KEY]),
                                      None if mark is None else int(mark), bounds[f"lo{i}"], bounds[f"hi{i}"])
        if mark is not None:
            metadata[IDENTITY_HIGH_WATER_MARK_KEY] = mark
        kept[name] = metadata
    return kept


def identity_checks(spark: SparkSession, plan: BackfillPlan, version: int) -> list[Check]:
    """One check per ``GENERATED BY DEFAULT AS IDENTITY`` column of the plan's target that the rebuilt table at
    ``version`` still has: it is an IDENTITY column with the start and step the plan read, and its high-water
    mark is at or past the plan's and past every value of the column at ``version`` (a row inserted later without
    the column gets a new number). The definition comes from the schema in ``version``'s own log entry."""
    wanted = [c for c in plan.target_identity if not c.always and c.start is not None]
    if not wanted:
        return []
    snapshot = latest_snapshot(spark, plan.target_table)
    schema = next((a["metaData"]["schemaString"] for a in commit_actions(spark, snapshot, version) or ()
                   if "metaData" in a), None)
    if schema is None:
        return []
    fields = json.loads(schema)["fields"]
    published = {c.name: c for c in identity_columns_of((f["name"], "bigint", f.get("metadata")) for f in fields)}
    names = [f["name"] for f in fields]
    present = [c for c in wanted if c.name in names]
    if not present:
        return []
    rows = spark.read.option("versionAsOf", version).table(plan.target_table)
    bounds = rows.agg(*[F.min(quote_ident(c.name)).alias(f"lo{i}") for i, c in enumerate(present)],
                      *[F.max(quote_ident(c.name)).alias(f"hi{i}") for i, c in enumerate(present)]).first()
    checks = []
    for i, c in enumerate(present):
        got = published.get(c.name)
        expected = f"{c.label} (START WITH {c.start} INCREMENT BY {c.step})"
        if got is None or got.always or (got.start, got.step) != (c.start, c.step):
            observed = "a plain column" if got is None else got.definition
            checks.append(Check("post_publish", "identity_kept", False, None, None, observed, expected,
                                f"column {c.name} is {observed} at version {version}, was {expected}"))
            continue
        floor = synced_high_water_mark(c.start, c.step, c.high_water_mark, bounds[f"lo{i}"], bounds[f"hi{i}"])
        ok = floor is None or (got.high_water_mark is not None and
                               (got.high_water_mark >= floor if c.step > 0 else got.high_water_mark <= floor))
        checks.append(Check("post_publish", "identity_kept", ok, None, None, got.definition,
                            f"{expected}, high-water mark {'none' if floor is None else floor} or past it",
                            None if ok else f"column {c.name} has high-water mark {got.high_water_mark} at version "
                            f"{version}: a row inserted without it could reuse a number up to {floor}"))
    return checks
