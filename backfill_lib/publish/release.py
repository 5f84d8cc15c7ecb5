"""Release: after the target's commit, recompute the downstream marts, then monitor every published table.

A mart is a child run (``RUN_ID__mN``) through the same stages, started by the ``run_child`` callable the
runner gives (so this module never calls back into the runner); on any failure every table the run published is
restored, newest first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pyspark.sql import SparkSession

from backfill_lib.core.checks import Check
from backfill_lib.core.errors import PublishError, RolledBackError, failure_message
from backfill_lib.core.faults import monitor_failure
from backfill_lib.core.progress import Reporter
from backfill_lib.intake.request import mart_order
from backfill_lib.plan.model import BackfillPlan, Batch, Implementation
from backfill_lib.publish.results import RunResult
from backfill_lib.publish.rollback import Rollback
from backfill_lib.ledger import Ledger
from backfill_lib.validate.suites import SuiteRunner, load_suite, suite_parameters


class Release:
    """Releases published runs: ``mart_plan(plan, index)`` is the child plan of mart ``index`` (request order),
    ``run_child(plan)`` runs one to its end."""

    def __init__(self, spark: SparkSession, ledger: Ledger, rollback: Rollback,
                 mart_plan: Callable[[BackfillPlan, int], BackfillPlan], run_child: Callable[[BackfillPlan], RunResult],
                 implementation: Implementation):
        self.spark = spark
        self.implementation = implementation
        self.ledger = ledger
        self.rollback = rollback
        self.mart_plan = mart_plan
        self.run_child = run_child

    def release(self, plan: BackfillPlan, reporter: Reporter,
                post: tuple[Check, ...]) -> tuple[tuple[RunResult, ...], tuple[Check, ...]]:
        """Recompute the marts in dependency order, then monitor every published table (``post``: the target's
        post-publish checks); return the marts' runs and the monitor's checks.

        Raises
        ------
        RolledBackError
            On any failure (a mart's run, the monitor): every table this run published was restored, newest
            first, and the run ends ``rolled_back``.
        """
        order = {m.table: i for i, m in enumerate(plan.request.marts)}
        results: list[RunResult] = []
        try:
            for mart in mart_order(plan.request.marts):
                reporter.stage(f"mart {mart.table}: recomputing the partitions that cover the range")
                results.append(self.run_child(self.mart_plan(plan, order[mart.table])))
            monitored = monitor(self.spark, plan, results, post, self.implementation)
            self.ledger.record_checks(plan.run_id, monitored)
            failed = [c for c in monitored if not c.success]
            if failed:
                raise PublishError(f"monitor: {failed[0].describe()}")
        except Exception as exc:  # a Spark error in a mart too: what this run published is restored
            message = self.rollback.restore_all(plan, results, f"release failed: {failure_message(exc)}", reporter)
            raise RolledBackError(f"run {plan.run_id} rolled back: {message}") from exc
        return tuple(results), tuple(monitored)


def monitor(spark: SparkSession, plan: BackfillPlan, marts: list[RunResult], post: tuple[Check, ...],
            implementation: Implementation) -> list[Check]:
    """After everything published: every published table's suite holds on its published range (plus any
    failure injected by ``BACKFILL_FAIL_MONITOR``).

    Where a replacing strategy (recompute, rebuild) published rows that the post-publish check proved equal
    to the validated staged rows (row counts per partition and checksums), the suite already passed on those
    very rows and is not run again; a patch's MERGE result was never validated whole, so its suite runs on
    the published range."""
    checks: list[Check] = []
    published = [(plan, post)] + [(r.plan, [c for c in r.checks if c.kind == "post_publish"])
                                  for r in marts if r.status == "published"]
    for p, verified in published:
        injected = monitor_failure(p.target_table)
        if injected:
            checks.append(Check("monitor", "injected_failure", False, None, None, message=f"{p.target_table}: {injected}"))
        if not p.request.expectations:
            continue
        if implementation(p).replaces_partitions and verified and all(c.success for c in verified):
            checks.append(Check("monitor", f"{p.target_table}: suite {Path(p.request.expectations).name}", True,
                                message="published rows equal the validated staged rows (post-publish row counts "
                                        "and checksums), on which the suite passed"))
            continue
        runner = SuiteRunner(load_suite(p.request.expectations), p.partition_keys)
        df = spark.table(p.target_table)
        df = df.where(p.predicate()) if p.request.range else df
        for c in runner.validate(df, suite_parameters(p, Batch(0, p.partitions))):
            checks.append(replace(c, kind="monitor", name=f"{p.target_table}: {c.name}"))
    return checks
