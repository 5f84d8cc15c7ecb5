"""Preflight: every check a run makes against the live tables before it stages a row, as one step.

Protected tables (``--approve``), the source's schema against the target's (how its columns are cast, asked of the
strategy), the schema changes a rebuild makes (said in one line), and, for a run about to stage, every mart's
source and the expectation suite; the staging mode a run is recorded with. Each refusal is a :class:`~backfill_lib.core.errors.BackfillError` naming what is
at fault; nothing is written before it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pyspark.sql import SparkSession
from rich.console import Console

from backfill_lib.core.progress import Reporter
from backfill_lib.core.settings import Settings
from backfill_lib.intake.schema_guard import ColumnCast, changes_line
from backfill_lib.plan.model import BackfillPlan, Implementation
from backfill_lib.plan.prepare import staging_choice
from backfill_lib.publish.safety import check_protected
from backfill_lib.publish.stage import published_tables
from backfill_lib.run.source_check import check_source_schema
from backfill_lib.validate.suites import load_suite


def with_staging_mode(spark: SparkSession, settings: Settings, console: Console, plan: BackfillPlan,
                      until: str | None) -> BackfillPlan:
    """``plan`` with the staging mode this run uses (:func:`~backfill_lib.plan.prepare.staging_choice`),
    recorded with its plan; a fall-back from the asked ``pinned`` is said in one line."""
    choice = staging_choice(spark, settings, plan, until)
    if choice.fallback:
        console.print(f"{plan.target_table}: {choice.fallback}", highlight=False)
    return replace(plan, staging_mode=choice.mode, staging_reason=choice.reason)


def preflight(spark: SparkSession, settings: Settings, plan: BackfillPlan, implementation: Implementation,
              reporter: Reporter) -> tuple[ColumnCast, ...]:
    """The checks before ``plan`` stages or publishes what it staged: protected tables, the source's schema
    (returned: how its columns are cast to the target's), and the schema changes a rebuild makes (said).

    Raises
    ------
    PublishError
        A protected table without its approval.
    IntakeError
        The source's schema or a rule at fault; nothing is written.
    """
    check_protected(settings.protected_tables, published_tables(plan), plan.approved_by)
    casts = check_source_schema(spark, plan, implementation)
    if implementation(plan).whole_table:
        reporter.stage(f"schema changes: {changes_line(plan.schema_changes, plan.request.schema_changes == 'allow')}")
    return casts


def staging_preflight(spark: SparkSession, plan: BackfillPlan, implementation: Implementation,
                      mart_plan: Callable[[BackfillPlan, int], BackfillPlan]):
    """The checks of a run about to stage, after :func:`preflight`: every mart's source (their plans from
    ``mart_plan``); returns the loaded expectation suite (``None`` without one).

    Raises
    ------
    IntakeError
        A mart's source or the suite at fault; nothing is written.
    """
    for i in range(len(plan.request.marts)):
        check_source_schema(spark, mart_plan(plan, i), implementation)
    return load_suite(plan.request.expectations) if plan.request.expectations else None
