"""The post-publish check of a replaceWhere commit from what its write observed and what its own entry in the
Delta log says, without reading the published data back or replaying the log.

Three facts show that the published range holds exactly the staged rows:

- the rows that went into the write, observed on their way in (Spark's ``Observation``: their count and the
  sum of the row hash over every column, as :func:`~backfill_lib.validate.fingerprints.partition_fingerprints`
  computes them), equal the staged rows' totals;
- per planned partition, the files the commit added hold the staged number of rows (their ``numRecords``
  statistics);
- per planned partition, the files the commit removed are exactly the files the plan read there (the plan's
  file-set fingerprint). Nothing else can be left in range: the fence refused to publish if another commit had
  changed the range since the plan, and Delta refuses a replaceWhere commit when another commit added files in
  its range after it read them (``ConcurrentAppendException``).

When the log cannot say (a file without statistics or with a deletion vector, a commit file already cleaned
up, a write whose observation did not arrive) or a count, checksum or file set differs, the caller reads the
version back instead (:func:`~backfill_lib.strategies.base.verify_partitions`), which also names the
partitions at fault.
"""

from __future__ import annotations

import json
from decimal import Decimal

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from backfill_lib.adapters.checksums import row_checksum
from backfill_lib.adapters.delta_log import commit_actions, file_set_fingerprint, latest_snapshot, partition_value_key
from backfill_lib.core.checks import Check
from backfill_lib.core.partitions import Grain
from backfill_lib.core.table_state import PartitionStats
from backfill_lib.plan.model import BackfillPlan, stats_by_key
from backfill_lib.publish.commit import Written


def observed(df: DataFrame) -> tuple[DataFrame, Observation]:
    """``df`` with an observation of its row count and checksum, taken as the rows flow into the write (no
    extra Spark job); read it with :func:`written` after the write."""
    observation = Observation()  # a unique name: writes of several runs may share a session
    return df.observe(observation, F.count(F.lit(1)).alias("rows"), row_checksum(df).alias("checksum")), observation


def written(observation: Observation) -> Written | None:
    """What ``observation`` saw, or ``None`` when its metrics did not arrive within 100 ms of the write.

    Spark completes an observation when the query that carried it ends, before the write returns; the bounded
    wait (the JVM's ``getRowOrEmpty``) keeps a write path that dropped the observation from blocking the run,
    which then reads the version back.
    """
    try:
        row = observation._jo.getRowOrEmpty()
        if row.isEmpty():
            return None
        jrow = row.get()
        rows, checksum = jrow.get(0), jrow.get(1)
        return Written(int(rows), None if checksum is None else Decimal(checksum.toPlainString()))
    except Exception:  # an internal API that changed shape: the public, unbounded one
        metrics = observation.get
        return Written(int(metrics["rows"]), metrics["checksum"])


def verify_commit(spark: SparkSession, plan: BackfillPlan, version: int, staged: dict[str, tuple[int, object]],
                  wrote: Written) -> list[Check] | None:
    """The post-publish checks of ``version`` (the run's replaceWhere commit) from ``wrote`` and the commit's
    actions in the Delta log, against ``staged`` (:func:`~backfill_lib.validate.fingerprints.partition_fingerprints`
    of the staged range) and the plan's file sets: one check of the written rows' count and checksum, and one per
    planned partition of its rows and replaced files.

    Returns ``None`` when they cannot all pass (see the module docstring); the caller then reads the version back.
    """
    if plan.range_in_data or (plan.date_parts and plan.request.target.grain is Grain.HOUR):
        # the log keys no file by the range's column (or by local hours): the caller reads the version back
        return None
    keys = [p.key for p in plan.partitions]
    staged_rows = sum(staged.get(k, (0, None))[0] for k in keys)
    sums = [staged[k][1] for k in keys if k in staged and staged[k][1] is not None]
    staged_checksum = sum(sums, Decimal(0)) if sums else None
    if (wrote.rows, wrote.checksum) != (staged_rows, staged_checksum):
        return None
    snapshot = latest_snapshot(spark, plan.target_table)
    actions = commit_actions(spark, snapshot, version)
    if actions is None:
        return None
    value_of = _partition_key_of(snapshot, plan)
    rows: dict[str, int] = {}
    removed: dict[str, list[str]] = {}
    for action in actions:
        if "add" in action:
            add = action["add"]
            count = json.loads(add.get("stats") or "{}").get("numRecords")
            if count is None or add.get("deletionVector"):
                return None
            value = value_of(add["partitionValues"])
            rows[value] = rows.get(value, 0) + int(count)
        elif "remove" in action:
            remove = action["remove"]
            removed.setdefault(value_of(remove["partitionValues"]), []).append(remove["path"])
    request = plan.request
    rows_by_key = stats_by_key({v: PartitionStats(rows=n) for v, n in rows.items()}, request.target.grain,
                               request.time_zone, plan.partition_format, wall_clock=plan.wall_clock)
    removed_by_key = stats_by_key({v: PartitionStats(fingerprint=file_set_fingerprint(paths))
                                   for v, paths in removed.items()}, request.target.grain, request.time_zone,
                                  plan.partition_format, wall_clock=plan.wall_clock)
    if set(rows_by_key) - set(keys) or set(removed_by_key) - set(keys):
        return None
    checks = [Check("post_publish", "written_rows_and_checksum_equal_staging", True, None, None,
                    f"{wrote.rows} rows, checksum {wrote.checksum} (observed in the write)",
                    f"{staged_rows} rows, checksum {staged_checksum} (staged)")]
    for p in plan.partitions:
        added = rows_by_key[p.key].rows if p.key in rows_by_key else 0
        expected = staged.get(p.key, (0, None))[0]
        replaced = removed_by_key[p.key].fingerprint if p.key in removed_by_key else ""
        if added != expected or replaced != p.current.fingerprint:
            return None
        checks.append(Check("post_publish", "rows_equal_staging_and_files_replaced", True, p.key, None,
                            f"{added} rows added, {p.current.files} files removed (Delta log, version {version})",
                            f"{expected} rows staged, the {p.current.files} files the plan read"))
    return checks


def _partition_key_of(snapshot, plan: BackfillPlan):
    """A function from an action's ``partitionValues`` to its partition value as the plan's stats key it: the
    range column's value, or the key integer date parts form (``2024-03-09``; a value that is no integer: ``None``,
    which no planned partition has)."""
    if not plan.date_parts:
        column = partition_value_key(snapshot, plan.partition_column)
        return lambda values: values.get(column)
    physical = [partition_value_key(snapshot, c) for c in plan.date_parts]
    keys = plan.partition_keys

    def key(values: dict) -> str | None:
        try:
            return keys.key_of_row({c: int(values[p]) for c, p in zip(plan.date_parts, physical)})
        except (KeyError, TypeError, ValueError):  # a NULL part: no key
            return None
    return key
