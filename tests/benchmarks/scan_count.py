"""Table scans per stage of a full run, from the Spark UI's REST API (``/api/v1/applications/<id>/sql``).

Each SQL execution lists its plan's nodes; a file scan is named ``Scan parquet <catalog.schema.table>`` (no name
for a path or time-travel read), a read of cached rows ``InMemoryTableScan``. An execution's jobs carry the job
group the stage timer set, so each scan is counted under the stage (the wrapped library call) that ran it.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter, defaultdict


def _executions(spark) -> list[dict]:
    url = spark.sparkContext.uiWebUrl
    if not url:
        return []
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/sql?details=true&planDescription=false"
                                f"&offset=0&length=100000", timeout=60) as reply:
        return json.load(reply)


def last_execution_id(spark) -> int:
    """The newest SQL execution's ID so far (-1: none, or no UI)."""
    return max((int(e["id"]) for e in _executions(spark)), default=-1)


def _ran(node: dict) -> bool:
    """Whether a file scan node read anything in this execution: the graph of a query over cached rows still
    shows the scan that filled the cache, with no metric values of its own."""
    for metric in node.get("metrics", []):
        if metric.get("name") in ("number of files read", "number of output rows"):
            digits = "".join(ch for ch in str(metric.get("value", "")).split("(")[0] if ch.isdigit())
            if digits and int(digits) > 0:
                return True
    return False


def kind_of(node: dict, staging_schema: str, target: str, sources: tuple[str, ...]) -> str | None:
    """``staging``, ``target``, ``source``, ``ledger or other`` or ``cache`` for a scan node that read in its
    execution (a file scan that did not, below a read of cached rows, counts nowhere); None for other nodes."""
    node_name = node.get("nodeName", "")
    if node_name.startswith("InMemoryTableScan"):
        return "cache"
    if not node_name.startswith("Scan ") or not _ran(node):
        return None
    name = node_name.lower()
    if f"{staging_schema.lower()}." in name:
        return "staging"
    if name.endswith(target.lower()) or f"{target.lower()} " in name:
        return "target"
    if any(s.lower() in name for s in sources):
        return "source"
    return "ledger or other"


def scans_by_stage(spark, job_groups: dict[str, set], after_id: int, staging_schema: str, target: str,
                   sources: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """``{stage: {kind: scans}}`` over the SQL executions newer than ``after_id``; ``job_groups`` maps each stage
    to the IDs of its Spark jobs. Executions without a job of a known stage count under ``unlabelled``."""
    stage_of = {job: stage for stage, jobs in job_groups.items() for job in jobs}
    out: dict[str, Counter] = defaultdict(Counter)
    for execution in _executions(spark):
        if int(execution["id"]) <= after_id:
            continue
        jobs = [*execution.get("successJobIds", []), *execution.get("failedJobIds", []),
                *execution.get("runningJobIds", [])]
        stage = next((stage_of[j] for j in jobs if j in stage_of), "unlabelled")
        for node in execution.get("nodes", []):
            kind = kind_of(node, staging_schema, target, sources)
            if kind:
                out[stage][kind] += 1
    return {stage: dict(kinds) for stage, kinds in sorted(out.items())}
