"""Rollback: RESTORE every table a run published (marts newest first, then the target), resumably.

The plan of RESTOREs is recorded in the ledger (status ``rolling_back``, column ``rollback_plan``) before the
first of them, so a rollback killed half-way is finished by the next ``rollback`` or ``resume``, and a table
already restored by this run (its own RESTORE commit, found by run ID) gets no second RESTORE.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pyspark.sql import SparkSession

from backfill_lib.adapters.session import session_time_zone
from backfill_lib.core.errors import PublishError, RolledBackError
from backfill_lib.core.faults import crash_point
from backfill_lib.core.progress import Reporter
from backfill_lib.intake.request import mart_order
from backfill_lib.plan.model import BackfillPlan, plan_from_summary
from backfill_lib.publish.commit import restore, restore_state
from backfill_lib.publish.results import RunResult
from backfill_lib.ledger import Ledger


def rollback_step(table: str, run_id: str, restore_to: int, published_version: int) -> dict:
    """One RESTORE of a rollback plan (the ledger's ``rollback_plan``): ``table`` back to version
    ``restore_to``; ``run_id`` (the run, or its mart's child run) published it as ``published_version``."""
    return {"table": table, "run_id": run_id, "restore_to": int(restore_to), "published_version": int(published_version)}


class Rollback:
    """Restores what runs published on one session, recording in one ledger; ``write_report(plan)`` rewrites a
    run's report once it is rolled back."""

    def __init__(self, spark: SparkSession, ledger: Ledger, write_report: Callable[[BackfillPlan], None]):
        self.spark = spark
        self.ledger = ledger
        self.write_report = write_report

    def plan_for(self, run_id: str, record: dict, plan: BackfillPlan, by: str, why: str) -> dict:
        """The rollback plan of published run ``run_id`` requested by ``by`` for ``why``: its published marts'
        child runs newest first (reverse dependency order), then the target."""
        steps = []
        order = {m.table: i for i, m in enumerate(plan.request.marts)}
        for mart in reversed(mart_order(plan.request.marts)):
            child = self.ledger.find_run(f"{run_id}__m{order[mart.table]}")
            if child and child["status"] == "published":
                steps.append(rollback_step(mart.table, child["run_id"], child["pre_publish_version"],
                                           child["published_version"]))
        steps.append(rollback_step(plan.target_table, run_id, record["pre_publish_version"], record["published_version"]))
        return {"action": "rollback", "why": f"rolled back by {by}: {why}",
                "extra": {"rolled_back_by": by, "rollback_reason": why}, "tables": steps}

    def restore_all(self, plan: BackfillPlan, marts: list[RunResult] | tuple[RunResult, ...], why: str,
                    reporter: Reporter, action: str = "restore", **extra: str) -> str:
        """RESTORE the marts this run published (newest first), then the target, to their pre-publish versions;
        mark them all ``rolled_back``; return what was restored."""
        current = self.ledger.run(plan.run_id)
        steps = [rollback_step(r.plan.target_table, r.plan.run_id, r.pre_publish_version, r.published_version)
                 for r in reversed(marts) if r.status == "published"]
        steps.append(rollback_step(plan.target_table, plan.run_id, current["pre_publish_version"],
                                   current["published_version"]))
        intent = {"action": action, "why": why, "extra": extra, "tables": steps}
        return self.finish(plan, self.record(current, intent), intent, reporter)

    def record(self, record: dict, intent: dict) -> dict:
        """Record ``intent`` (status ``rolling_back``, column ``rollback_plan``) and wait until it is committed:
        no RESTORE runs before the ledger knows the whole plan."""
        planned = ", ".join(f"{t['table']} to version {t['restore_to']}" for t in intent["tables"])
        record = self.ledger.record_run(record, "rolling_back", rollback_plan=json.dumps(intent),
                                        message=f"{intent['why']}; restoring {planned}")
        self.ledger.flush()
        return record

    def finish(self, plan: BackfillPlan, record: dict, intent: dict, reporter: Reporter) -> str:
        """Carry out a recorded rollback plan, table by table in its order: a table this run already restored
        (its own RESTORE commit, found by run ID in the table's history) or already back at the content of the
        version to restore is done; any other gets one RESTORE. Marks the marts' child runs and then the run
        ``rolled_back``; returns what was restored."""
        action, extra = intent["action"], intent.get("extra") or {}
        done = []
        for i, step in enumerate(intent["tables"]):
            if i:
                crash_point("between_restores", i)
            table, to = step["table"], step["restore_to"]
            child = None if step["run_id"] == plan.run_id else self.ledger.run(step["run_id"])
            step_plan = plan if child is None else plan_from_summary(json.loads(child["plan_json"]))
            state, version, _ = restore_state(self.spark, table, plan.commit_run_id, step["published_version"], to)
            if state == "todo":
                version = restore(self.spark, step_plan, table, to, action, **extra)
                done.append(f"{table} to version {to}")
            elif state == "restored":
                done.append(f"{table} to version {to} (already restored as version {version})")
            else:
                done.append(f"{table} to version {to} (already at its content)")
            # `backfill status` lists partitions by their latest event: they are no longer published
            self.ledger.record_partitions(step["run_id"], [{"partition": p.key, "status": "rolled_back"}
                                                           for p in step_plan.partitions])
            if child is not None and child["status"] != "rolled_back":
                self.ledger.record_run(child, "rolled_back", message=f"{intent['why']}; restored version {to}"
                                       + ("" if version is None else f" as {version}"))
        message = f"{intent['why']}; restored {', '.join(done)}"
        self.ledger.record_run(record, "rolled_back", message=message)
        reporter.stage(message)
        self.write_report(plan)
        return message

    def blockers(self, plan: BackfillPlan, intent: dict) -> list[str]:
        """Tables of ``intent`` still to restore that have commits after the run's own, which a RESTORE would
        undo too (this rollback's own RESTOREs are not among them)."""
        blockers = []
        for step in intent["tables"]:
            state, _, later = restore_state(self.spark, step["table"], plan.commit_run_id, step["published_version"],
                                            step["restore_to"])
            if state == "todo" and later:
                blockers.append(f"table {step['table']} has versions {', '.join(map(str, later))} after this run's "
                                f"version {step['published_version']}")
        return blockers

    def continue_recorded(self, plan: BackfillPlan, record: dict, reporter: Reporter) -> None:
        """Finish the rollback recorded for ``record``'s run (status ``rolling_back``: a rollback or automatic
        restore was killed), as it would have; always raises.

        Raises
        ------
        PublishError
            When a table still to restore has commits after the run's (:meth:`blockers`).
        RolledBackError
            Once it is finished, saying what was restored.
        """
        run_id = plan.run_id
        intent = json.loads(record["rollback_plan"])
        blockers = self.blockers(plan, intent)
        if blockers:
            raise PublishError(f"run {run_id} is rolling back, refused to continue: {'; '.join(blockers)}; "
                               f"RESTORE would undo them too (backfill rollback {run_id} --force restores anyway)")
        reporter.stage(f"continuing the rollback recorded before: {record['message']}")
        with self.ledger.durable():
            message = self.finish(plan, record, intent, reporter)
        raise RolledBackError(f"run {run_id} rolled back: {message}")

    def rollback(self, run_id: str, by: str, why: str, force: bool, reporter: Reporter) -> str:
        """Restore every table of published run ``run_id`` (marts newest first, then the target) to its
        pre-publish version, recording ``by`` and ``why`` in the ledger and in the RESTORE commits; return the
        line to show. Runs in the run's own time zone.

        Idempotent and resumable: the plan (tables and versions) is recorded (status ``rolling_back``) before the
        first RESTORE; a run found ``rolling_back`` continues its recorded plan, and a table this run already
        restored gets no second RESTORE. A run already ``rolled_back`` is left as it is (the line says so).

        Raises
        ------
        PublishError
            When the run is neither ``published`` nor rolling or rolled back, or (without ``force``) a table
            still to restore has commits after the run's, which a RESTORE would silently undo; the message names
            the table and those versions.
        """
        self.ledger.ensure()
        record = self.ledger.run(run_id)
        status = record["status"]
        if status == "rolled_back":
            return f"run {run_id} was already rolled back; nothing to restore ({record['message']})"
        if status not in ("published", "rolling_back"):
            raise PublishError(f"run {run_id} is {status}; only a published run can be rolled back")
        plan = plan_from_summary(json.loads(record["plan_json"]))
        intent = (json.loads(record["rollback_plan"]) if status == "rolling_back"
                  else self.plan_for(run_id, record, plan, by, why))
        blockers = self.blockers(plan, intent)
        if blockers and not force:
            raise PublishError(f"rollback of run {run_id} refused: {'; '.join(blockers)}; RESTORE would undo them too "
                               "(rerun with --force to restore anyway)")
        with self.ledger.durable(), session_time_zone(self.spark, plan.session_time_zone, f"run {run_id}"):
            if status == "rolling_back":
                reporter.stage(f"continuing the rollback recorded before: {record['message']}")
            else:
                record = self.record(record, intent)
            return f"run {run_id}: rolled back; {self.finish(plan, record, intent, reporter)}"
