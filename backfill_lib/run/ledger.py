"""The ledger: run, partition and check records in Delta tables beside the data.

Every table is append-only: a state change is a new event row, and the latest event (by ``seq``, nanoseconds
since the epoch when the event was recorded, strictly increasing within a process) wins. Blind appends never
conflict with each other in Delta, so parallel batches and resumed runs can record freely, and writing the same
event twice changes no state.

Events are written behind: ``record_*`` queues them and a writer thread appends whatever is queued (after
lingering up to :data:`LINGER_SECONDS` for more, unless a flush or :meth:`Ledger.write_now` ends the wait) with one
``INSERT`` per table (the tables at once), so a Delta commit is paid per burst of events rather than per event,
off the run's own path. :meth:`Ledger.flush` waits until everything queued is committed; every read
flushes first, and the runner makes events durable where it matters: the run's plan before any row is staged
(each batch waits for it before writing, :meth:`Ledger.wait_committed`), and the end of every run. A crash loses
at most the events since the last commit, which is safe: a lost ``staged`` event means that batch is staged again
(its write replaces), a lost check means the run validates again, and a lost ``publishing`` event is harmless
because a resumed run looks for its own commit in the target's history before publishing (and Delta's
idempotent-write guard refuses a second one).

Tables, in ``settings.ledger_schema``:

- ``runs``: run_id, seq, event_at (UTC), status, request_name, target_table, owner, reason, strategy,
  staging_table, target_version_seen, pre_publish_version, published_version, message, plan_json (the frozen
  plan as JSON, on the ``planned`` event only; readers see the latest non-null value),
  approved_by (who approved publishing to a protected table), rollback_until (UTC: until when RESTORE of the
  pre-publish version stays possible under the table's retention settings), rollback_plan (JSON, from the
  ``rolling_back`` event on: the RESTOREs a rollback or automatic restore makes, in order, each table with the
  version it restores and the run that published it, recorded before the first of them). A downstream mart is a
  child run ``RUN_ID__mN`` with its own events.
- ``partitions``: run_id, seq, event_at, partition (Delta partition value), batch, status, rows, attempt,
  started_at, ended_at (UTC), message.
- ``checks``: run_id, seq, event_at, batch, partition, kind (``expectation``, ``reconciliation``, ``gate``,
  ``diff``, ``post_publish``), name, success, observed, expected, message.
- ``diffs``: run_id, seq, event_at, partition, inserted, deleted, updated, unchanged (rows, staged against the
  target by key), changed_columns and abs_change (JSON objects: column -> rows changed / sum of |change|).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from backfill_lib.core.checks import Check
from backfill_lib.core.errors import BackfillError, RunNotFoundError

log = logging.getLogger(__name__)

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
    ]
)

#: How long the writer waits after the first queued event for more, unless a flush or ``write_now`` ends the wait
#: (seconds). Each burst costs a Delta commit per table (a Spark job and a commit, 0.2-0.3 s of a local core), so
#: a short run's events share the commits of its flushes; a batch that took longer than this is committed at once
#: by the stager (:meth:`Ledger.write_now`), so a crash never loses more than this much staging work.
LINGER_SECONDS = 30.0

_SCHEMAS = {"runs": RUNS_SCHEMA, "partitions": PARTITIONS_SCHEMA, "checks": CHECKS_SCHEMA, "diffs": DIFFS_SCHEMA}


def json_value(value: object) -> object:
    """A ledger value as JSON: timestamps as ISO 8601 text in UTC with the offset written out (so parsing them
    does not depend on the session time zone), everything else as it is."""
    if isinstance(value, datetime):
        utc = value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return utc.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
    return value


def _string_literal(text: str) -> str:
    """A Spark SQL string literal of ``text``, through hex, so no quoting or escaping setting can change it."""
    return f"CAST(X'{text.encode().hex()}' AS STRING)"


#: how :func:`json_value` writes a timestamp, in Spark's datetime pattern
JSON_TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Ledger:
    """Reads and appends ledger records in ``schema`` (``spark_catalog`` unless the name says otherwise)."""

    def __init__(self, spark: SparkSession, schema: str):
        self.spark = spark
        self.schema = schema
        self._ensured = False
        self._queue: list[tuple[str, dict]] = []  # (table, row) in the order recorded
        self._writing = 0  # rows taken by the writer and not yet committed
        self._error: BaseException | None = None
        self._seq = 0
        self._committed = 0  # the highest seq committed
        self._lost_from: int | None = None  # the lowest seq of events whose commit failed
        self._cond = threading.Condition()
        self._writer: threading.Thread | None = None
        self._flushing = 0  # threads waiting in flush(): the writer stops lingering
        self._last_run: dict[str, dict] = {}  # run_id -> the run record record_run last returned
        self._hurry = False  # write_now() was called: the writer stops lingering once
        self._on_commit: list[tuple[int, object]] = []  # (seq, callback) run by the writer once seq is committed

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}"

    def ensure(self) -> None:
        """Create the ledger schema and tables when missing; add columns a newer version defines (nullable, so
        older events read as NULL there). Done once per :class:`Ledger`: a run, its resume and its marts' child
        runs all call it."""
        if self._ensured:
            return
        self._ensured = True
        self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
        for name, schema in _SCHEMAS.items():
            if not self.spark.catalog.tableExists(self.table(name)):
                self.spark.createDataFrame([], schema).write.format("delta").mode("ignore").saveAsTable(
                    self.table(name)
                )
                continue
            have = set(self.spark.table(self.table(name)).columns)
            missing = [f for f in schema.fields if f.name not in have]
            if missing:
                added = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in missing)
                self.spark.sql(f"ALTER TABLE {self.table(name)} ADD COLUMNS ({added})")

    def _append(self, name: str, rows: list[dict]) -> None:
        """Queue ``rows`` for table ``name``, stamped now (``event_at``) and numbered (``seq``)."""
        if not rows:
            return
        stamp = _now()
        with self._cond:
            for r in rows:
                self._seq = max(time.time_ns(), self._seq + 1)
                self._queue.append((name, {**r, "seq": self._seq, "event_at": stamp}))
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(target=self._write_loop, name=f"ledger-{self.schema}", daemon=True)
                self._writer.start()
            self._cond.notify_all()

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    if not self._cond.wait(timeout=30):
                        self._writer = None  # idle: a later event starts a new writer
                        return
                # Linger, so events recorded close together (a stage's checks, diffs and status) share one
                # commit per table instead of two bursts in a row; a flush ends the wait at once.
                deadline = time.monotonic() + LINGER_SECONDS
                while not self._flushing and not self._hurry and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(timeout=left)
                batch, self._queue, self._hurry = self._queue, [], False
                self._writing = len(batch)
            try:
                by_table: dict[str, list[dict]] = {}
                for name, row in batch:
                    by_table.setdefault(name, []).append(row)
                # One commit per table, the tables at once: each INSERT mostly waits on Spark and Delta.
                with ThreadPoolExecutor(len(by_table), thread_name_prefix=f"ledger-{self.schema}") as pool:
                    for done in [pool.submit(self._insert, name, rows) for name, rows in by_table.items()]:
                        done.result()
                with self._cond:
                    self._committed = max(self._committed, max(row["seq"] for _, row in batch))
                    ready = [fn for seq, fn in self._on_commit if seq <= self._committed]
                    self._on_commit = [(seq, fn) for seq, fn in self._on_commit if seq > self._committed]
                    self._cond.notify_all()  # waiters go on while the callbacks run
                for fn in ready:
                    try:
                        fn()
                    except Exception:  # a callback must not stop the ledger
                        log.exception("ledger %s: callback after commit failed", self.schema)
            except BaseException as exc:  # raised to the run by the next flush
                with self._cond:
                    self._error = self._error or exc
                    first = min(row["seq"] for _, row in batch)
                    self._lost_from = first if self._lost_from is None else min(self._lost_from, first)
            finally:
                with self._cond:
                    self._writing = 0
                    self._cond.notify_all()

    def _insert(self, name: str, rows: list[dict]) -> None:
        # One INSERT of one string literal, the rows as a JSON array that from_json parses in the JVM: no Python
        # workers, one Delta commit, and a parse cost that stays flat with the rows (a VALUES clause of 2,555
        # check rows took 1.3-2.5 s to insert, this 0.9-1.1 s; 1 row 0.6 s either way). FAILFAST: a value of the
        # wrong type fails the write (raised by the next flush) instead of being stored as NULL.
        schema = _SCHEMAS[name]
        payload = json.dumps([{f.name: json_value(r.get(f.name)) for f in schema.fields} for r in rows])
        columns = ", ".join(f.name for f in schema.fields)
        array_type = f"array<{schema.simpleString()}>"
        self.spark.sql(
            f"INSERT INTO {self.table(name)} ({columns}) SELECT {columns} FROM (SELECT inline(from_json("
            f"{_string_literal(payload)}, '{array_type}', "
            f"map('timestampFormat', {_string_literal(JSON_TIMESTAMP_FORMAT)}, 'mode', 'FAILFAST'))))"
        )

    def write_now(self) -> None:
        """Start committing what is queued without waiting for it (the writer stops lingering), so the commit
        overlaps the caller's next steps and a later :meth:`flush` waits less."""
        with self._cond:
            self._hurry = bool(self._queue)
            self._cond.notify_all()

    def recorded(self) -> int:
        """The sequence number of the last event recorded so far (0 when none was), for :meth:`wait_committed`."""
        with self._cond:
            return self._seq

    def wait_committed(self, seq: int) -> None:
        """Wait until every event up to ``seq`` (from :meth:`recorded`) is committed; events recorded later keep
        lingering unless the writer takes them along. Safe from several threads at once.

        Raises
        ------
        Exception
            The error of the failed ledger write that lost one of those events (it stays for :meth:`flush`).
        """
        with self._cond:
            while self._committed < seq and not self._lost(seq):
                if not self._hurry and any(row["seq"] <= seq for _, row in self._queue):
                    self._hurry = True  # still queued: stop lingering
                    self._cond.notify_all()
                self._cond.wait()
            if self._lost(seq):
                raise self._error or BackfillError(f"ledger {self.schema}: events up to {seq} were not committed")

    def when_committed(self, seq: int, callback) -> None:
        """Call ``callback()`` once every event up to ``seq`` (from :meth:`recorded`) is committed: at once when
        it is, else from the writer thread right after that commit (without lingering for it: the run's own
        steps decide when the writer commits). Never called when the write of one of those events fails (the
        next :meth:`flush` raises that). :meth:`flush` returns only after the callbacks of the commits it waited
        for, so a callback must not flush or read the ledger itself."""
        with self._cond:
            if self._committed < seq:
                self._on_commit.append((seq, callback))
                return
        callback()

    def _lost(self, seq: int) -> bool:
        """Whether a failed write lost an event up to ``seq`` (call holding ``_cond``)."""
        return self._lost_from is not None and self._lost_from <= seq

    def flush(self) -> None:
        """Wait until every event recorded so far is committed.

        Raises
        ------
        Exception
            The error of a failed ledger write (once); the events of that write are lost.
        """
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._queue or self._writing:
                    self._cond.wait()
            finally:
                self._flushing -= 1
            error, self._error = self._error, None
        if error is not None:
            raise error

    def record_run(self, run: dict, status: str, **changes) -> dict:
        """Append a run event: the previous run record with ``changes`` and the new ``status``; return it.

        ``plan_json`` is written with the ``planned`` event only (it can be megabytes); the returned record
        keeps it."""
        record = {**run, **changes, "status": status}
        self._append("runs", [record if status == "planned" else {**record, "plan_json": None}])
        self._last_run[record["run_id"]] = record
        return record

    def last_recorded(self, run_id: str) -> dict | None:
        """The run record :meth:`record_run` last returned for ``run_id`` in this process (no read), or ``None``."""
        return self._last_run.get(run_id)

    def record_partitions(self, run_id: str, rows: list[dict]) -> None:
        """Append partition events; each dict has at least ``partition`` and ``status``."""
        self._append("partitions", [{**r, "run_id": run_id} for r in rows])

    def record_checks(self, run_id: str, checks: list[Check]) -> None:
        self._append("checks", [{**c.__dict__, "run_id": run_id} for c in checks])

    @staticmethod
    def _latest(df: DataFrame, *keys: str) -> DataFrame:
        w = Window.partitionBy(*keys).orderBy(F.col("seq").desc())
        return df.withColumn("_n", F.row_number().over(w)).where("_n = 1").drop("_n")

    def _fold_runs(self, df: DataFrame) -> DataFrame:
        """Per run: every column of its latest event, except ``plan_json``: the latest non-null one."""
        others = [c for c in df.columns if c not in ("run_id", "plan_json")]
        plan_seq = F.when(F.col("plan_json").isNotNull(), F.col("seq"))
        folded = df.groupBy("run_id").agg(
            F.max_by(F.struct(*others), "seq").alias("_r"), F.max_by("plan_json", plan_seq).alias("plan_json")
        )
        return folded.select(*[F.col(f"_r.{c}").alias(c) if c in others else F.col(c) for c in df.columns])

    def runs(self) -> DataFrame:
        """The latest record of every run."""
        self.flush()
        return self._fold_runs(self.spark.table(self.table("runs")))

    def find_run(self, run_id: str) -> dict | None:
        """The latest record of ``run_id``, or ``None`` when the ledger has none."""
        self.flush()
        rows = self._fold_runs(self.spark.table(self.table("runs")).where(F.col("run_id") == run_id)).collect()
        return rows[0].asDict() if rows else None

    def has_run(self, run_id: str) -> bool:
        """Whether the ledger has any event of ``run_id`` (one scan with a limit, no folding)."""
        self.flush()
        return bool(self.spark.table(self.table("runs")).where(F.col("run_id") == run_id).select("run_id").limit(1).collect())

    def run(self, run_id: str) -> dict:
        """The latest record of ``run_id``; raises :class:`RunNotFoundError` when the ledger has none."""
        record = self.find_run(run_id)
        if record is None:
            raise RunNotFoundError(f"run {run_id} not found in ledger {self.table('runs')}")
        return record

    def staged_rows(self, run_id: str) -> dict[str, int]:
        """Rows by partition key of the partitions whose latest event is ``staged`` (what a resume skips)."""
        return {p["partition"]: int(p["rows"] or 0) for p in self.partitions(run_id) if p["status"] == "staged"}

    def partitions(self, run_id: str) -> list[dict]:
        """Every partition of ``run_id``, ordered by partition: status, rows and message of its latest event;
        batch and attempt of its latest event that had them; first start and last end over its events."""
        self.flush()
        df = self.spark.table(self.table("partitions")).where(F.col("run_id") == run_id)
        latest = {c: F.max_by(c, "seq").alias(c) for c in ("status", "message", "seq", "event_at")}
        when_set = {c: F.max_by(c, F.when(F.col(c).isNotNull(), F.col("seq"))).alias(c) for c in ("batch", "attempt", "rows")}
        folded = df.groupBy("run_id", "partition").agg(
            *latest.values(), *when_set.values(),
            F.min("started_at").alias("started_at"), F.max("ended_at").alias("ended_at"),
        )
        return [r.asDict() for r in folded.orderBy("partition").collect()]

    def partition_rows(self, run_id: str) -> dict[str, int | None]:
        """Rows by partition key of every partition of ``run_id`` (its latest event that had rows)."""
        return {p["partition"]: p["rows"] for p in self.partitions(run_id)}

    def recorded_checks(self, run_id: str) -> tuple[Check, ...]:
        """:meth:`checks` as :class:`Check` objects, in the order written."""
        return tuple(Check(c["kind"], c["name"], c["success"], c["partition"], c["batch"], c["observed"], c["expected"],
                           c["message"]) for c in self.checks(run_id))

    def record_diffs(self, run_id: str, diffs) -> None:
        """Append one row per :class:`backfill_lib.validate.diff.PartitionDiff`."""
        self._append("diffs", [
            {"run_id": run_id, "partition": d.partition, "inserted": d.inserted, "deleted": d.deleted,
             "updated": d.updated, "unchanged": d.unchanged, "changed_columns": json.dumps(d.changed_columns),
             "abs_change": json.dumps({k: str(v) for k, v in d.abs_change.items()})}
            for d in diffs
        ])

    def diffs(self, run_id: str) -> list[dict]:
        """The latest diff of every partition of ``run_id``."""
        self.flush()
        df = self.spark.table(self.table("diffs")).where(F.col("run_id") == run_id)
        return [r.asDict() for r in self._latest(df, "partition").orderBy("partition").collect()]

    def checks(self, run_id: str) -> list[dict]:
        """The checks of ``run_id``'s latest validation (those written after its last ``validating`` event, so a
        resumed run that validated again does not list the first round twice), in the order written."""
        self.flush()
        runs = self.spark.table(self.table("runs")).where((F.col("run_id") == run_id) & (F.col("status") == "validating"))
        since = runs.agg(F.max("seq")).first()[0] or 0
        df = self.spark.table(self.table("checks")).where((F.col("run_id") == run_id) & (F.col("seq") > since))
        return [r.asDict() for r in df.orderBy("seq").collect()]


def run_record(plan) -> dict:
    """The fixed fields of a run's ledger record, from its plan."""
    request = plan.request
    return {
        "run_id": plan.run_id,
        "request_name": request.name,
        "target_table": plan.target_table,
        "owner": request.owner,
        "reason": request.reason,
        "strategy": request.strategy.value,
        "staging_table": plan.staging_table,
        "target_version_seen": plan.target_version,
        "plan_json": json.dumps(plan.summary()),
    }
