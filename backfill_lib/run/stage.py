"""The Run stage: stage every batch of a plan into its staging table, recording progress in the ledger."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import SparkSession

from backfill_lib.core.progress import Reporter
from backfill_lib.core.settings import Settings
from backfill_lib.intake.schema_guard import ColumnCast
from backfill_lib.plan.model import BackfillPlan, Implementation
from backfill_lib.core.staging_mode import PINNED
from backfill_lib.run.batch_stager import BatchStager
from backfill_lib.ledger import Ledger


@dataclass(frozen=True)
class Staged:
    """What staging produced: the plan, how the source's columns were cast, and the staged rows per partition
    key (every planned partition; a resumed run's earlier batches included)."""

    plan: BackfillPlan
    casts: tuple[ColumnCast, ...]
    rows: dict[str, int] = field(default_factory=dict)


def stage(spark: SparkSession, settings: Settings, ledger: Ledger, cancelled: threading.Event, plan: BackfillPlan,
          casts: tuple[ColumnCast, ...], reporter: Reporter, resumed: bool, implementation: Implementation,
          ready: Callable[[], None] = lambda: None) -> Staged:
    """Stage ``plan``'s batches (a ``resumed`` durable run skips the partitions the ledger has as staged; a pinned
    run stages them all again); each batch
    calls ``ready()`` before it writes its first row (what it raises stops the run, nothing written by that batch).

    Raises
    ------
    CancelledError
        When ``cancelled`` is set: batches in flight finish, the rest are left for ``resume``.
    BackfillError
        The first batch error (stray rows, duplicate keys, a conflict that did not clear).
    """
    # a fresh run staged nothing yet; a pinned run's staged rows did not outlive the process that pinned them
    done = ledger.staged_rows(plan.run_id) if resumed and plan.staging_mode != PINNED else {}
    rows = BatchStager(spark, settings, ledger, cancelled, implementation, ready).stage(plan, casts, reporter, done)
    return Staged(plan, casts, rows)
