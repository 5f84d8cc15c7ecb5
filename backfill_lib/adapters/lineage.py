"""OpenLineage run events for backfill runs and their marts' child runs, sent with ``openlineage-python``.

:class:`LineageEmitter` listens to the ledger's run events (:attr:`backfill_lib.ledger.Ledger.listeners`), so
every path that records a status (run, resume, publish of a validated run, a mart's child run) reports alike:

- ``START`` when the run is planned: the sources it reads, each with the Delta version it pinned;
- ``COMPLETE`` when it is published (or found nothing to change): the target with the version written and the
  rows written (``outputStatistics.rowCount``, the staged rows; 0 when unchanged), the inputs again;
- ``FAIL`` when it failed (the one-line message in ``errorMessage``); ``ABORT`` when cancelled or abandoned.

Each event carries the backfill run ID (``externalQuery`` run facet, source ``delta-backfill``) and a ``parent``
run facet: a mart's child run names its backfill run; a backfill run names the run from ``$OPENLINEAGE_PARENT_ID``
or the settings' ``lineage.parent`` (an Airflow task that started it). Rollbacks send nothing.

Nothing is sent when neither the settings (``lineage.transport``) nor the client's environment configure a
transport. A failure to send is logged and never fails the backfill.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

from backfill_lib.core.errors import first_line
from backfill_lib.core.lineage import (
    EVENT_OF_STATUS, ParentRun, configured_by_environment, external_parent, lineage_run_id,
)
from backfill_lib.core.settings import LineageSettings

log = logging.getLogger(__name__)

PRODUCER = "https://github.com/delta-backfill/delta-backfill"


def make_client(settings: LineageSettings):
    """The OpenLineage client the settings or the environment configure, or None when neither does."""
    if settings.transport is None and not configured_by_environment():
        return None
    from openlineage.client import OpenLineageClient

    if settings.transport is not None:
        return OpenLineageClient(config={"transport": dict(settings.transport)})
    return OpenLineageClient()


class LineageEmitter:
    """Sends a run event for every ledger run event whose status :data:`EVENT_OF_STATUS` maps.

    ``rows_of(run_id)`` returns the rows a run staged (read when it completes)."""

    def __init__(self, settings: LineageSettings, client, rows_of):
        self.settings = settings
        self.client = client
        self.rows_of = rows_of
        self._parent = external_parent(settings.parent)  # read once: a bad value is refused at start

    def __call__(self, record: dict, status: str) -> None:
        event_type = EVENT_OF_STATUS.get(status)
        if event_type is None:
            return
        try:
            self.client.emit(self.event(record, status, event_type))
        except Exception as exc:  # lineage is reporting: it must not fail the backfill
            log.warning("OpenLineage %s event of run %s not sent: %s", event_type, record.get("run_id"),
                        first_line(exc))

    def event(self, record: dict, status: str, event_type: str):
        """The ``RunEvent`` for ``record`` entering ``status``."""
        from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
        from openlineage.client.facet_v2 import (
            dataset_version_dataset, error_message_run, external_query_run, output_statistics_output_dataset,
            parent_run,
        )

        plan = json.loads(record["plan_json"]) if record.get("plan_json") else {}
        run_id, request_name = record["run_id"], record["request_name"]
        parent_run_id = plan.get("parent_run_id")
        # a mart's child request is named "<request>:<mart table>", its parent the backfill run of <request>
        parent = (ParentRun(self.settings.namespace, request_name.partition(":")[0], lineage_run_id(parent_run_id))
                  if parent_run_id is not None else self._parent)
        run_facets = {"externalQuery": external_query_run.ExternalQueryRunFacet(
            externalQueryId=run_id, source="delta-backfill", producer=PRODUCER)}
        if parent is not None:
            run_facets["parent"] = parent_run.ParentRunFacet(
                run=parent_run.Run(runId=parent.run_id),
                job=parent_run.Job(namespace=parent.namespace, name=parent.job), producer=PRODUCER)
        if event_type == "FAIL" and record.get("message"):
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=record["message"], programmingLanguage="python", producer=PRODUCER)

        def version_facet(version) -> dict:
            return {} if version is None else {"version": dataset_version_dataset.DatasetVersionDatasetFacet(
                datasetVersion=str(version), producer=PRODUCER)}

        ns = self.settings.dataset_namespace
        inputs = [InputDataset(namespace=ns, name=s["table"], facets=version_facet(s.get("version")))
                  for s in plan.get("source_versions") or ()]
        outputs = []
        if event_type == "COMPLETE":
            written = record.get("published_version") if status == "published" else record.get("target_version_seen")
            rows = sum(self.rows_of(run_id).values()) if status == "published" else 0
            outputs.append(OutputDataset(
                namespace=ns, name=record["target_table"], facets=version_facet(written),
                outputFacets={"outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                    rowCount=rows, producer=PRODUCER)}))
        else:
            outputs.append(OutputDataset(namespace=ns, name=record["target_table"]))
        return RunEvent(
            eventType=getattr(RunState, event_type),
            eventTime=datetime.now(timezone.utc).isoformat(),
            run=Run(runId=lineage_run_id(run_id), facets=run_facets),
            job=Job(namespace=self.settings.namespace, name=request_name),
            inputs=inputs,
            outputs=outputs,
            producer=PRODUCER,
        )


def _written_rows(ledger, run_id: str) -> dict[str, int]:
    """Rows by partition of a published run's partitions (their latest event ``staged`` or ``published``)."""
    return {p["partition"]: int(p["rows"] or 0) for p in ledger.partitions(run_id)
            if p["status"] in ("staged", "published")}


def attach(ledger, settings: LineageSettings) -> LineageEmitter | None:
    """Add a :class:`LineageEmitter` to ``ledger``'s listeners when a transport is configured; return it."""
    client = make_client(settings)
    if client is None:
        return None
    emitter = LineageEmitter(settings, client, lambda run_id: _written_rows(ledger, run_id))
    ledger.listeners.append(emitter)
    return emitter
