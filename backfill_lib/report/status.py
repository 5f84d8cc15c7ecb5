"""What ``backfill status`` shows, read from the ledger: the latest runs, or one run and its partitions, as the
text view's rows and as the :class:`~backfill_lib.report.documents.StatusDocument` of ``--json``."""

from __future__ import annotations

from dataclasses import dataclass

from backfill_lib.ledger import Ledger
from backfill_lib.report.documents import PartitionStatus, RunDetail, RunListItem, StatusDocument, Versions, utc_text
from backfill_lib.run.cleanup import staging_exists, staging_kept


def status_document(ledger: Ledger, run_id: str | None) -> StatusDocument:
    """What ``status`` prints, as a :class:`~backfill_lib.report.documents.StatusDocument`: the 20 latest runs,
    or ``run_id`` and its partitions."""
    if run_id is None:
        return StatusDocument(run=None, runs=[RunListItem(
            run_id=r["run_id"], status=r["status"], request=r["request_name"], target_table=r["target_table"],
            owner=r["owner"], published_version=r["published_version"],
            staging_kept=staging_exists(ledger.spark, r["staging_table"]), updated_at=utc_text(r["event_at"]))
            for r in ledger.latest_runs(20)])
    r = ledger.run(run_id)
    return StatusDocument(runs=None, run=RunDetail(
        run_id=run_id, status=r["status"], request=r["request_name"], target_table=r["target_table"], owner=r["owner"],
        reason=r["reason"], staging_table=r["staging_table"], staging_kept=staging_exists(ledger.spark, r["staging_table"]),
        versions=Versions(target_seen=r["target_version_seen"], pre_publish=r["pre_publish_version"],
                          published=r["published_version"]),
        rollback_until=utc_text(r.get("rollback_until")), approved_by=r.get("approved_by"), message=r["message"],
        partitions=[PartitionStatus(partition=p["partition"], batch=p["batch"], status=p["status"], rows=p["rows"],
                                    attempt=p["attempt"], started_at=utc_text(p["started_at"]),
                                    ended_at=utc_text(p["ended_at"]), message=p["message"])
                    for p in ledger.partitions(run_id)]))


@dataclass(frozen=True)
class RunList:
    """``backfill status``: the ledger records of the 20 latest runs (newest first) and which of their staging
    tables are still there (one ``SHOW TABLES`` per schema, :func:`~backfill_lib.run.cleanup.staging_kept`)."""

    runs: list
    kept: set[str]


@dataclass(frozen=True)
class RunStatus:
    """``backfill status RUN_ID``: the run's latest ledger record, whether its staging table is still there, and
    its partitions (:meth:`~backfill_lib.ledger.Ledger.partitions`)."""

    run: dict
    staging_kept: bool
    partitions: list[dict]


def run_list(ledger: Ledger) -> RunList:
    latest = ledger.latest_runs(20)
    return RunList(latest, staging_kept(ledger.spark, [r["staging_table"] for r in latest]))


def run_status(ledger: Ledger, run_id: str) -> RunStatus:
    """Raises :class:`~backfill_lib.core.errors.RunNotFoundError` when the ledger has no such run."""
    run = ledger.run(run_id)
    return RunStatus(run, staging_exists(ledger.spark, run["staging_table"]), ledger.partitions(run_id))
