"""The run's first step: intake against the live source, right before anything is staged."""

from __future__ import annotations

from pyspark.sql import SparkSession

from backfill_lib.adapters.generated import with_generated
from backfill_lib.core.table_state import Column
from backfill_lib.intake.rule_checks import check_rules
from backfill_lib.intake.schema_guard import ColumnCast
from backfill_lib.plan.model import BackfillPlan, Implementation
from backfill_lib.plan.source_query import source_frame


def check_source_schema(spark: SparkSession, plan: BackfillPlan, implementation: Implementation) -> tuple[ColumnCast, ...]:
    """Intake against the live source: analyse the source SQL at the plan's pinned versions (no data read),
    check every rule's tables, columns and expressions (:func:`~backfill_lib.intake.rule_checks.check_rules`),
    and return how the source's columns are cast to the target's (asked of the strategy:
    :meth:`~backfill_lib.strategies.base.StrategyImpl.align_source`; a generated column of the target the source
    omits is computed by its expression, and the rules are then checked against the rows as staged).

    Raises
    ------
    IntakeError
        Naming the source file and the column at fault; nothing is written.
    """
    bounds = (plan.batches[0].start, plan.batches[0].end) if plan.request.range else (None, None)
    frame = source_frame(spark, plan.request, *bounds, versions=plan.pinned_versions)
    # the rules read the rows as staged: a generated column the source omits computed
    check_rules(spark, plan.request, plan.request_path, with_generated(frame, plan.target_generated))
    columns = tuple(Column(f.name, f.dataType.simpleString(), f.nullable) for f in frame.schema.fields)
    return implementation(plan).align_source(plan, columns, str(plan.request.source.sql))
