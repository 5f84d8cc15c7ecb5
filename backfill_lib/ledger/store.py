"""The :class:`Ledger` a run uses: creates the ledger tables, records events and reads them back folded.

Every table is append-only (see :mod:`backfill_lib.ledger`): a read folds a run's or partition's events to
the latest one by ``seq``. Writing is :class:`~backfill_lib.ledger.writer.EventWriter`'s, which
:class:`Ledger` extends, so every read here flushes first and sees every event recorded before it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from backfill_lib.adapters.delta_log import catalog_folder, live_metadata
from backfill_lib.core.checks import Check
from backfill_lib.core.errors import RunNotFoundError
from backfill_lib.ledger import by_path
from backfill_lib.ledger.schema import SCHEMAS, RunRecord
from backfill_lib.ledger.writer import EventWriter


#: Table properties of every ledger table. Each commit of events adds one small file, and every run reads the
#: ``runs`` table (its lease check, twice) in time that grows with their number, several seconds at thousands of
#: files. Delta's auto compaction rewrites them into one after the commit
#: that leaves 50 small files (``spark.databricks.delta.autoCompact.minNumFiles``), in the writer's own thread.
LEDGER_PROPERTIES = {"delta.autoOptimize.autoCompact": "true"}


class Ledger(EventWriter):
    """Reads and appends ledger records in ``schema`` (``spark_catalog`` unless the name says otherwise)."""

    def __init__(self, spark: SparkSession, schema: str, through_files: bool = True):
        super().__init__(spark, schema)
        #: append to and read the tables through their files where they are local (:mod:`~backfill_lib.ledger.by_path`)
        self.through_files = through_files
        self._ensured = False
        self._last_run: dict[str, dict] = {}  # run_id -> the run record record_run last returned
        self._turn_marks: dict[str, tuple[int, int] | None] = {}  # run_id -> its runs-table mark (watch_from)
        #: called as ``listener(record, status)`` after every run event is queued (lineage); they must not raise
        self.listeners: list = []

    def _create(self, table: str, schema, attempts: int = 5) -> None:
        """Create the empty ledger table ``table``. Another process's first run may create it at the same moment:
        the loser of Delta's first commit on the empty directory (``ProtocolChangedException``) or of the
        catalog's create finds the winner's table and uses it; any other failure is raised after ``attempts``."""
        for attempt in range(attempts):
            try:
                self.spark.createDataFrame([], schema).write.format("delta").mode("ignore").options(
                    **LEDGER_PROPERTIES).saveAsTable(table)
                return
            except Exception:
                if self.spark.catalog.tableExists(table):
                    return
                if attempt == attempts - 1:
                    raise
                time.sleep(0.5 * (attempt + 1))  # the winner's log is written; its catalog entry follows

    def ensure(self) -> None:
        """Create the ledger schema and tables when missing, with :data:`LEDGER_PROPERTIES`; on existing tables,
        add columns a newer version defines (nullable, so older events read as NULL there) and set a property of
        :data:`LEDGER_PROPERTIES` the table does not have at all (a value its owner set stays). Done once per
        :class:`Ledger`: a run, its resume and its marts' child runs all call it."""
        if self._ensured:
            return
        self._ensured = True
        self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
        files = self.through_files and by_path.available()
        for name, schema in SCHEMAS.items():
            table = self.table(name)
            found = self._files_metadata(name, table) if files else None
            if found is None:
                if not self.spark.catalog.tableExists(table):
                    self._create(table, schema)
                    if files:
                        self._local_files(name, catalog_folder(self.spark, table))
                    continue
                properties, columns = live_metadata(self.spark, table)  # one snapshot: its properties and columns
                found = properties, [c.name for c in columns]
            properties, have = found
            missing = [f for f in schema.fields if f.name not in have]
            if missing:
                added = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in missing)
                self.spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({added})")
            unset = {k: v for k, v in LEDGER_PROPERTIES.items() if k not in properties}
            if unset:
                pairs = ", ".join(f"'{k}' = '{v}'" for k, v in unset.items())
                self.spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({pairs})")

    def _files_metadata(self, name: str, table: str) -> tuple[dict[str, str], list[str]] | None:
        """Ledger table ``name``'s properties and column names read through its files, which from then on take its
        appends and lease reads (a catalog call and its log, no Spark job: Spark would first read the commits
        delta-rs wrote since its last look, in a job per table); ``None`` when it is not a Delta table on this
        machine that delta-rs reads (missing; a table feature delta-rs does not know; a damaged log): Spark then
        reads and writes it."""
        local = self._local_files(name, catalog_folder(self.spark, table))
        if local is None:
            return None
        try:
            return local.metadata()
        except Exception:
            del self._by_path[name]
            return None

    def _local_files(self, name: str, folder: str | None) -> by_path.LedgerTable | None:
        """Append to and read table ``name`` through its files when ``folder`` is a Delta table's on this machine
        (return it), else ``None``."""
        if folder is None or not os.path.isdir(os.path.join(folder, "_delta_log")):
            return None
        self._by_path[name] = by_path.LedgerTable(folder, self.table(name))
        return self._by_path[name]

    def files_of(self, name: str) -> by_path.LedgerTable | None:
        """Table ``name`` read through its files (:meth:`_local_files`) when it is a Delta table on this machine,
        without creating anything (for read-only commands that do not call :meth:`ensure`); ``None`` otherwise."""
        if name in self._by_path:
            return self._by_path[name]
        if not (self.through_files and by_path.available()):
            return None
        return self._local_files(name, catalog_folder(self.spark, self.table(name)))

    def statuses(self, run_ids) -> dict[str, str]:
        """The latest status of each of ``run_ids`` that the ledger has (read only for those runs: a filtered read,
        not a fold of every run)."""
        wanted = sorted({r for r in run_ids if r})
        if not wanted:
            return {}
        self.flush()
        files = self.files_of("runs")
        if files is not None:
            import pyarrow.compute as pc

            events = files.rows(["run_id", "seq", "status"], pc.field("run_id").isin(wanted))
        else:
            events = [r.asDict() for r in self.spark.table(self.table("runs"))
                      .where(F.col("run_id").isin(wanted)).select("run_id", "seq", "status").collect()]
        latest: dict[str, dict] = {}
        for event in events:
            if event["run_id"] not in latest or event["seq"] > latest[event["run_id"]]["seq"]:
                latest[event["run_id"]] = event
        return {run_id: event["status"] for run_id, event in latest.items()}

    def request_events(self, request_name: str) -> list[dict]:
        """Per run of request ``request_name``: its latest event's ``run_id``, ``status``, ``seq``,
        ``target_table`` and ``published_version``, its latest non-null ``plan_json`` and its first ``seq``
        (``planned_seq``); ``[]`` when the ``runs`` table does not exist (nothing is created). Read through the
        table's files where they are local (one filtered read), else through Spark."""
        columns = ["run_id", "seq", "status", "target_table", "published_version", "plan_json"]
        self.flush()
        files = self.files_of("runs")
        if files is not None:
            import pyarrow.compute as pc

            from backfill_lib.ledger.files import LedgerFiles

            events = files.rows(columns, pc.field("request_name") == request_name)
            first: dict[str, int] = {}
            for event in events:
                first[event["run_id"]] = min(event["seq"], first.get(event["run_id"], event["seq"]))
            return [{**run, "planned_seq": first[run["run_id"]]} for run in LedgerFiles.fold_runs(events)]
        name = self.table("runs")
        if not self.spark.catalog.tableExists(name):
            return []
        runs = self.spark.table(name).where(F.col("request_name") == request_name).select(*columns)
        return [r.asDict() for r in self._fold_runs(runs, planned_seq=F.min("seq")).collect()]

    def record_run(self, run: Mapping, status: str, **changes) -> RunRecord:
        """Append a run event: the previous run record (a :class:`~backfill_lib.ledger.schema.RunRecord`, or a
        ledger read's mapping) with ``changes`` and the new ``status``; return the new record.

        ``plan_json`` is written with the ``planned`` event only (it can be megabytes); the returned record
        keeps it."""
        record = RunRecord.of(run).advanced(status, **changes)
        self._append("runs", [dict(record) if status == "planned" else {**record, "plan_json": None}])
        self._last_run[record["run_id"]] = record
        for listener in self.listeners:
            listener(record, status)
        return record

    @contextlib.contextmanager
    def durable(self):
        """Every event recorded in the block is committed when it ends, however it ends (a ledger error then does
        not replace the block's own)."""
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self.flush()
            raise
        self.flush()

    def last_recorded(self, run_id: str) -> RunRecord | None:
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

    def _fold_runs(self, df: DataFrame, **extra) -> DataFrame:
        """Per run: every column of its latest event, except ``plan_json``: the latest non-null one; then one
        column per ``extra`` (name: an aggregate over the run's events)."""
        others = [c for c in df.columns if c not in ("run_id", "plan_json")]
        plan_seq = F.when(F.col("plan_json").isNotNull(), F.col("seq"))
        folded = df.groupBy("run_id").agg(
            F.max_by(F.struct(*others), "seq").alias("_r"), F.max_by("plan_json", plan_seq).alias("plan_json"),
            *[agg.alias(name) for name, agg in extra.items()],
        )
        return folded.select(*[F.col(f"_r.{c}").alias(c) if c in others else F.col(c) for c in df.columns], *extra)

    def runs(self) -> DataFrame:
        """The latest record of every run."""
        self.flush()
        return self._fold_runs(self.spark.table(self.table("runs")))

    def latest_runs(self, limit: int = 20) -> list:
        """The latest record of each of the ``limit`` runs with the latest events, newest first (``status``)."""
        return self.runs().orderBy(F.col("seq").desc()).limit(limit).collect()

    def leases(self, table: str, flush: bool = True, location: str = "") -> list:
        """The :class:`~backfill_lib.core.leases.Lease` of every run of ``table`` (any spelling; also any name
        whose plan read the data path ``location``, when given: ``delta.`<path>``` or a catalog alias) whose latest
        status is not final (not in :data:`~backfill_lib.core.leases.RELEASED`); expired ones and failed runs that
        hold none (:attr:`~backfill_lib.core.leases.Lease.held`) included.

        Read without a shuffle, as it stands before every run's staging: the narrow columns of the events of
        ``table`` (the ledger stores a run's target in its canonical spelling, whose lower-cased form is
        :func:`~backfill_lib.core.table_names.same_table_key`'s, so SQL filters on it) and the plan events that
        read ``location`` are collected and folded here; then, only when a run holds its lease, the plans of the
        runs that do; and, only when another name's run read ``location``, that run's events.

        ``flush=False`` reads what is committed without waiting for this process's queued events."""
        from backfill_lib.core.leases import RELEASED, lease_of
        from backfill_lib.core.table_names import same_location, same_table_key

        if flush:
            self.flush()
        key = same_table_key(table)
        files = self._by_path.get("runs")
        events = (self._lease_events_of_files(files, key, location) if files is not None
                  else self._lease_events(key, location))
        latest, first = {}, {}
        for event in events:
            run_id, seq = event["run_id"], event["seq"]
            if run_id not in latest or seq > latest[run_id]["seq"]:
                latest[run_id] = event
            first[run_id] = min(seq, first.get(run_id, seq))
        open_ids = sorted(run_id for run_id, event in latest.items() if event["status"] not in RELEASED)
        if not open_ids:
            return []
        if files is not None:
            import pyarrow.compute as pc

            found = files.rows(["run_id", "seq", "plan_json"],
                               pc.field("run_id").isin(open_ids) & pc.field("plan_json").is_valid())
        else:
            found = [r.asDict() for r in self.spark.table(self.table("runs")).where(
                F.col("run_id").isin(*open_ids) & F.col("plan_json").isNotNull()).select("run_id", "seq", "plan_json").collect()]
        plans = {}
        for row in found:
            if row["run_id"] not in plans or row["seq"] > plans[row["run_id"]]["seq"]:
                plans[row["run_id"]] = row
        leases = [lease_of({**latest[run_id], "plan_json": plans[run_id]["plan_json"],
                            "planned_seq": first[run_id]}) for run_id in open_ids if run_id in plans]
        return [lease for lease in leases
                if same_table_key(lease.table) == key or same_location(lease.location, location)]

    #: the columns of the ``runs`` table a lease is made of
    _LEASE_COLUMNS = ["run_id", "seq", "status", "event_at", "owner", "resumable", "target_table"]

    def _lease_events(self, key: str, location: str) -> list[dict]:
        """Through Spark: the narrow events of the runs of the table whose :func:`same_table_key` is ``key``, and
        of the runs whose plan read ``location``; without a shuffle."""
        from backfill_lib.core.table_names import location_spellings, same_table_key

        runs = self.spark.table(self.table("runs"))
        narrow = self._LEASE_COLUMNS
        if not key.isascii():  # Spark's and Python's lower-casing agree on ASCII only: every run, compared later
            return [e.asDict() for e in runs.select(*narrow).collect()]
        named = F.lower("target_table") == F.lit(key)
        if location:  # only a plan event holds the path
            read_it = F.get_json_object("plan_json", "$.target_location").isin(*location_spellings(location))
            named = named | F.coalesce(read_it, F.lit(False))
        events = runs.where(named).select(*narrow).collect()
        others = {e.run_id for e in events if e.target_table is None or same_table_key(e.target_table) != key}
        if others:  # their events under their own name, not matched by the filter above
            events = [e for e in events if e.run_id not in others] + runs.where(
                F.col("run_id").isin(*sorted(others))).select(*narrow).collect()
        return [e.asDict() for e in events]

    def _lease_events_of_files(self, files: by_path.LedgerTable, key: str, location: str) -> list[dict]:
        """:meth:`_lease_events` read through the table's files: every run's narrow events, those of the runs
        named ``key`` (in Python's lower case, which the ledger's canonical spelling agrees with) or whose plan
        read ``location`` kept."""
        import pyarrow.compute as pc

        from backfill_lib.core.table_names import location_spellings, same_table_key

        events = files.rows(self._LEASE_COLUMNS)
        names = {e["target_table"] for e in events}
        ours = {n for n in names if n is not None and same_table_key(n) == key}
        wanted = {e["run_id"] for e in events if e["target_table"] in ours}
        if location:
            spellings = set(location_spellings(location))
            # only plans whose JSON holds the location's text are parsed (JSON writes it escaped, or as it is)
            texts = {t for sp in spellings for t in (json.dumps(sp)[1:-1], json.dumps(sp, ensure_ascii=False)[1:-1])}
            holds = None
            for text in sorted(texts):
                found = pc.match_substring(pc.field("plan_json"), text)
                holds = found if holds is None else holds | found
            for plan in files.rows(["run_id", "plan_json"], pc.field("plan_json").is_valid() & holds):
                try:
                    read = json.loads(plan["plan_json"]).get("target_location")
                except (ValueError, AttributeError):
                    continue
                if read in spellings:
                    wanted.add(plan["run_id"])
        return [e for e in events if e["run_id"] in wanted]

    def find_run(self, run_id: str) -> dict | None:
        """The latest record of ``run_id``, or ``None`` when the ledger has none."""
        self.flush()
        files = self._by_path.get("runs")
        if files is not None:
            import pyarrow.compute as pc

            from backfill_lib.ledger.files import LedgerFiles

            folded = LedgerFiles.fold_runs(files.rows(where=pc.field("run_id") == run_id))
            return folded[0] if folded else None
        rows = self._fold_runs(self.spark.table(self.table("runs")).where(F.col("run_id") == run_id)).collect()
        return rows[0].asDict() if rows else None

    def watch_from(self, run_id: str, mark: tuple[int, int] | None) -> None:
        """Note the ``runs`` table's mark (:meth:`commit_mark`) read before ``run_id``'s ``planned`` event was
        recorded, for :meth:`abandoned_event`: an abandon of the run can only be committed after it."""
        self._turn_marks[run_id] = mark

    def abandoned_event(self, run_id: str) -> dict | None:
        """The latest ``abandoned`` event of ``run_id`` committed to the ledger by any process (``message``,
        ``seq``), or ``None``: one filtered read of the ``runs`` table, not flushed first. What it asks for comes
        from another process (``backfill abandon``, which commits its event before it returns), so this
        process's own queued events need not be committed for it; ``abandoned`` is final (nothing resumes such a
        run), so any such event counts, however old.

        Not read at all when :meth:`watch_from` noted a mark for the run and every commit to the ``runs`` table
        since was this writer's, with this run's events only (:meth:`only_commits_of`, a look at the table's
        latest version): no other process has written an event since the run existed."""
        if run_id in self._turn_marks and self.only_commits_of("runs", self._turn_marks[run_id], run_id):
            return None
        files = self._by_path.get("runs")
        if files is not None:
            import pyarrow.compute as pc

            found = files.rows(["message", "seq"], (pc.field("run_id") == run_id) & (pc.field("status") == "abandoned"))
            return max(found, key=lambda r: r["seq"]) if found else None
        rows = (self.spark.table(self.table("runs"))
                .where((F.col("run_id") == run_id) & (F.col("status") == "abandoned"))
                .select("message", "seq").orderBy(F.col("seq").desc()).limit(1).collect())
        return rows[0].asDict() if rows else None

    def has_run(self, run_id: str) -> bool:
        """Whether the ledger has any event of ``run_id`` (one scan with a limit, no folding)."""
        self.flush()
        files = self._by_path.get("runs")
        if files is not None:
            import pyarrow.compute as pc

            return bool(files.rows(["run_id"], pc.field("run_id") == run_id))
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
        """Append one row per :class:`backfill_lib.validate.diff.PartitionDiff` (its ``samples`` as JSON text)."""
        self._append("diffs", [
            {"run_id": run_id, "partition": d.partition, "inserted": d.inserted, "deleted": d.deleted,
             "updated": d.updated, "unchanged": d.unchanged, "changed_columns": json.dumps(d.changed_columns),
             "abs_change": json.dumps({k: str(v) for k, v in d.abs_change.items()}),
             "samples": json.dumps(list(d.samples), ensure_ascii=False)}
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
