"""The ledger's tables: their Delta schemas, how a Python value is written into them, and a run's first record.

Tables, in ``settings.ledger_schema``:

- ``runs``: run_id, seq, event_at (UTC), status, request_name, target_table, owner, reason, strategy,
  staging_table, target_version_seen, pre_publish_version, published_version, message, plan_json (the frozen
  plan as JSON, on the ``planned`` event only; readers see the latest non-null value),
  approved_by (who approved publishing to a protected table), rollback_until (UTC: until when RESTORE of the
  pre-publish version stays possible under the table's retention settings), rollback_plan (JSON, from the
  ``rolling_back`` event on: the RESTOREs a rollback or automatic restore makes, in order, each table with the
  version it restores and the run that published it, recorded before the first of them), resumable (on a
  ``failed`` event: whether the error may pass on a retry, so the run keeps its lease for ``backfill resume``;
  :func:`backfill_lib.core.errors.resumable_failure`). A downstream mart is a
  child run ``RUN_ID__mN`` with its own events.
- ``partitions``: run_id, seq, event_at, partition (Delta partition value), batch, status, rows, attempt,
  started_at, ended_at (UTC), message.
- ``checks``: run_id, seq, event_at, batch, partition, kind (``expectation``, ``reconciliation``, ``gate``,
  ``diff``, ``post_publish``), name, success, observed, expected, message.
- ``diffs``: run_id, seq, event_at, partition, inserted, deleted, updated, unchanged (rows, staged against the
  target by key), changed_columns and abs_change (JSON objects: column -> rows changed / sum of |change|),
  samples (JSON array: a few changed rows before and after, :attr:`backfill_lib.validate.diff.PartitionDiff.samples`;
  NULL in diffs recorded before the column was added).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime, timezone

from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

RUNS_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("event_at", TimestampType(), False),
        StructField("status", StringType(), False),
        StructField("request_name", StringType()),
        StructField("target_table", StringType()),
        StructField("owner", StringType()),
        StructField("reason", StringType()),
        StructField("strategy", StringType()),
        StructField("staging_table", StringType()),
        StructField("target_version_seen", LongType()),
        StructField("pre_publish_version", LongType()),
        StructField("published_version", LongType()),
        StructField("message", StringType()),
        StructField("plan_json", StringType()),
        StructField("approved_by", StringType()),
        StructField("rollback_until", TimestampType()),
        StructField("rollback_plan", StringType()),
        StructField("resumable", BooleanType()),
    ]
)

PARTITIONS_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("event_at", TimestampType(), False),
        StructField("partition", StringType(), False),
        StructField("batch", IntegerType()),
        StructField("status", StringType(), False),
        StructField("rows", LongType()),
        StructField("attempt", IntegerType()),
        StructField("started_at", TimestampType()),
        StructField("ended_at", TimestampType()),
        StructField("message", StringType()),
    ]
)

CHECKS_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("event_at", TimestampType(), False),
        StructField("batch", IntegerType()),
        StructField("partition", StringType()),
        StructField("kind", StringType(), False),
        StructField("name", StringType(), False),
        StructField("success", BooleanType(), False),
        StructField("observed", StringType()),
        StructField("expected", StringType()),
        StructField("message", StringType()),
    ]
)

DIFFS_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("event_at", TimestampType(), False),
        StructField("partition", StringType()),
        StructField("inserted", LongType()),
        StructField("deleted", LongType()),
        StructField("updated", LongType()),
        StructField("unchanged", LongType()),
        StructField("changed_columns", StringType()),
        StructField("abs_change", StringType()),
        StructField("samples", StringType()),
    ]
)

#: every ledger table by name, in the order :meth:`Ledger.ensure` creates them
SCHEMAS = {"runs": RUNS_SCHEMA, "partitions": PARTITIONS_SCHEMA, "checks": CHECKS_SCHEMA, "diffs": DIFFS_SCHEMA}


def json_value(value: object) -> object:
    """A ledger value as JSON: timestamps as ISO 8601 text in UTC with the offset written out (so parsing them
    does not depend on the session time zone), everything else as it is."""
    if isinstance(value, datetime):
        utc = value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return utc.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
    return value


#: how :func:`json_value` writes a timestamp, in Spark's datetime pattern
JSON_TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"


def string_literal(text: str) -> str:
    """A Spark SQL string literal of ``text``, through hex, so no quoting or escaping setting can change it."""
    return f"CAST(X'{text.encode().hex()}' AS STRING)"


@dataclass(frozen=True, eq=False)
class RunRecord(Mapping):
    """A run's record as its latest event holds it (the columns of :data:`RUNS_SCHEMA`; ``seq`` and ``event_at``
    are stamped when the event is queued). Frozen: a transition records a new record
    (:meth:`~backfill_lib.ledger.store.Ledger.record_run`, called by the stage that owns the transition). Read like
    the mapping of column to value the ledger's reads return (``record["status"]``, ``record.get(...)``)."""

    run_id: str
    status: str | None = None
    request_name: str | None = None
    target_table: str | None = None
    owner: str | None = None
    reason: str | None = None
    strategy: str | None = None
    staging_table: str | None = None
    target_version_seen: int | None = None
    pre_publish_version: int | None = None
    published_version: int | None = None
    message: str | None = None
    plan_json: str | None = None
    approved_by: str | None = None
    rollback_until: datetime | None = None
    rollback_plan: str | None = None
    resumable: bool | None = None
    seq: int | None = None
    event_at: datetime | None = None

    @classmethod
    def of(cls, values: Mapping) -> RunRecord:
        """The record of ``values`` (a ledger row or record; columns this version does not know are left out)."""
        return values if isinstance(values, RunRecord) else cls(**{k: v for k, v in values.items() if k in _RUN_FIELDS})

    def advanced(self, status: str, **changes) -> RunRecord:
        """This record in ``status`` with ``changes`` (column: value); a column this version does not know is a
        ``TypeError``."""
        return replace(self, status=status, **changes)

    def __getitem__(self, key: str):
        if key not in _RUN_FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(_RUN_FIELDS)

    def __len__(self) -> int:
        return len(_RUN_FIELDS)


_RUN_FIELDS = tuple(f.name for f in fields(RunRecord))


def run_record(plan) -> RunRecord:
    """The fixed fields of a run's ledger record, from its plan."""
    request = plan.request
    return RunRecord(run_id=plan.run_id, request_name=request.name, target_table=plan.target_table,
                     owner=request.owner, reason=request.reason, strategy=request.strategy.value,
                     staging_table=plan.staging_table, target_version_seen=plan.target_version,
                     plan_json=json.dumps(plan.summary()))
