"""What ``backfill status`` shows, read from the ledger: the latest runs, or one run and its partitions, as the
text view's rows and as the :class:`~backfill_lib.report.documents.StatusDocument` of ``--json``."""

from __future__ import annotations

from pyspark.sql import functions as F

from backfill_lib.report.documents import PartitionStatus, RunDetail, RunListItem, StatusDocument, Versions, utc_text
from backfill_lib.run.cleanup import staging_exists


def status_document(ledger, run_id: str | None) -> StatusDocument:
    """What ``status`` prints, as a :class:`~backfill_lib.report.documents.StatusDocument`: the 20 latest runs,
    or ``run_id`` and its partitions."""
    if run_id is None:
        return StatusDocument(run=None, runs=[RunListItem(
            run_id=r["run_id"], status=r["status"], request=r["request_name"], target_table=r["target_table"],
            owner=r["owner"], published_version=r["published_version"],
            staging_kept=staging_exists(ledger.spark, r["staging_table"]), updated_at=utc_text(r["event_at"]))
            for r in ledger.runs().orderBy(F.col("seq").desc()).limit(20).collect()])
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
