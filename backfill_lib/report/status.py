"""What ``backfill status`` shows, read from the ledger: the latest runs, or one run and its partitions, as the
text view's rows and as the :class:`~backfill_lib.report.documents.StatusDocument` of ``--json``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from backfill_lib.ledger import Ledger
from backfill_lib.report.documents import (PartitionStatus, RunDetail, RunListItem, StatusDocument, Versions,
                                          planned_partitions_of, staging_mode_of, utc_text)
from backfill_lib.run.cleanup import staging_kept


class StatusSource(Protocol):
    """Where ``status`` reads: the ledger through Spark (:class:`CatalogStatus`) or its files
    (:class:`~backfill_lib.ledger.files.LedgerFiles`, the embedded default, no JVM)."""

    def latest_runs(self, limit: int = 20) -> list: ...
    def run(self, run_id: str) -> dict: ...
    def partitions(self, run_id: str) -> list[dict]: ...
    def staging_kept(self, names: list[str | None]) -> set[str]: ...


class CatalogStatus:
    """A :class:`StatusSource` on ``ledger``'s session: its reads, and the catalog for the staging tables."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger

    def latest_runs(self, limit: int = 20) -> list:
        return self.ledger.latest_runs(limit)

    def run(self, run_id: str) -> dict:
        return self.ledger.run(run_id)

    def partitions(self, run_id: str) -> list[dict]:
        return self.ledger.partitions(run_id)

    def staging_kept(self, names: list[str | None]) -> set[str]:
        return staging_kept(self.ledger.spark, names)


def status_document(source: StatusSource, run_id: str | None) -> StatusDocument:
    """What ``status`` prints, as a :class:`~backfill_lib.report.documents.StatusDocument`: the 20 latest runs,
    or ``run_id`` and its partitions."""
    if run_id is None:
        latest = source.latest_runs(20)
        kept = source.staging_kept([r["staging_table"] for r in latest])
        return StatusDocument(run=None, runs=[RunListItem(
            run_id=r["run_id"], status=r["status"], request=r["request_name"], target_table=r["target_table"],
            owner=r["owner"], published_version=r["published_version"],
            staging_kept=r["staging_table"] in kept, updated_at=utc_text(r["event_at"]))
            for r in latest])
    r = source.run(run_id)
    return StatusDocument(runs=None, run=RunDetail(
        run_id=run_id, status=r["status"], request=r["request_name"], target_table=r["target_table"], owner=r["owner"],
        reason=r["reason"], staging=(mode := staging_mode_of(r)),
        staging_table=None if mode == "pinned" else r["staging_table"],
        staging_kept=mode != "pinned" and r["staging_table"] in source.staging_kept([r["staging_table"]]),
        versions=Versions(target_seen=r["target_version_seen"], pre_publish=r["pre_publish_version"],
                          published=r["published_version"]),
        rollback_until=utc_text(r.get("rollback_until")), approved_by=r.get("approved_by"), message=r["message"],
        planned_partitions=planned_partitions_of(r),
        partitions=[PartitionStatus(partition=p["partition"], batch=p["batch"], status=p["status"], rows=p["rows"],
                                    attempt=p["attempt"], started_at=utc_text(p["started_at"]),
                                    ended_at=utc_text(p["ended_at"]), message=p["message"])
                    for p in source.partitions(run_id)]))


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

    @property
    def pinned(self) -> bool:
        """Whether the run held its staged rows in its Spark session (no staging table to look for)."""
        return staging_mode_of(self.run) == "pinned"


def run_list(source: StatusSource) -> RunList:
    latest = source.latest_runs(20)
    return RunList(latest, source.staging_kept([r["staging_table"] for r in latest]))


def run_status(source: StatusSource, run_id: str) -> RunStatus:
    """Raises :class:`~backfill_lib.core.errors.RunNotFoundError` when the ledger has no such run."""
    run = source.run(run_id)
    kept = staging_mode_of(run) != "pinned" and run["staging_table"] in source.staging_kept([run["staging_table"]])
    return RunStatus(run, kept, source.partitions(run_id))
