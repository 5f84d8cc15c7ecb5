"""The ledger's write-behind: :class:`EventWriter` queues events and a writer thread appends them in bursts.

The ledger's ``record_*`` methods queue events (``_append``) and a writer thread appends whatever is queued (after
lingering up to :data:`LINGER_SECONDS` for more, unless a flush or :meth:`EventWriter.write_now` ends the wait)
with one append per table (the tables at once), so a Delta commit is paid per burst of events rather than per
event, off the run's own path. :meth:`EventWriter.flush` waits until everything queued is committed; every read of
the ledger flushes first, and the runner makes events durable where it matters: the run's plan before any row is
staged (each batch waits for it before writing, :meth:`EventWriter.wait_committed`), and the end of every run. A
crash loses at most the events since the last commit, which is safe: a lost ``staged`` event means that batch is
staged again (its write replaces), a lost check means the run validates again, and a lost ``publishing`` event is
harmless because a resumed run looks for its own commit in the target's history before publishing (and Delta's
idempotent-write guard refuses a second one).

:class:`backfill_lib.ledger.store.Ledger` is an :class:`EventWriter`: it adds the tables' creation, the
``record_*`` methods and the reads.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from pyspark.sql import SparkSession
from pyspark.sql.types import StringType

from backfill_lib.core.errors import BackfillError
from backfill_lib.ledger.by_path import LedgerTable
from backfill_lib.ledger.schema import JSON_TIMESTAMP_FORMAT, SCHEMAS, json_value, string_literal

log = logging.getLogger(__name__)

#: How long the writer waits after the first queued event for more, unless a flush or ``write_now`` ends the wait
#: (seconds). Each burst costs a Delta commit per table (a Spark job and a commit), so
#: a short run's events share the commits of its flushes; a batch that took longer than this is committed at once
#: by the stager (:meth:`Ledger.write_now`), so a crash never loses more than this much staging work.
LINGER_SECONDS = 30.0


#: the keys of a ledger commit's userMetadata: the run IDs whose events it holds, and of those the runs whose
#: ``planned`` event it holds
TAG_KEY, PLANNED_KEY, WRITER_KEY = "ledger_runs", "planned_runs", "writer"


def commit_tag(runs, planned=(), writer: str | None = None) -> str:
    """The ``userMetadata`` of a ledger commit holding events of ``runs`` (run IDs; ``None`` left out), the
    ``planned`` events of ``planned`` among them, made by the writer (:attr:`EventWriter.token`) ``writer``."""
    tag = {TAG_KEY: sorted(r for r in runs if r is not None)}
    if planned:
        tag[PLANNED_KEY] = sorted(planned)
    if writer:
        tag[WRITER_KEY] = writer
    return json.dumps(tag)


def tag_writer(meta: str | None) -> str | None:
    """The writer token a ledger commit's ``userMetadata`` names (:func:`commit_tag`), ``None`` if none."""
    try:
        writer = json.loads(meta).get(WRITER_KEY) if meta else None
    except (ValueError, AttributeError):
        return None
    return writer if isinstance(writer, str) else None


def tagged_runs(meta: str | None, key: str = TAG_KEY) -> list[str]:
    """The run IDs a ledger commit's ``userMetadata`` names under ``key`` (:func:`commit_tag`); none for any
    other text."""
    try:
        runs = json.loads(meta).get(key) if meta else None
    except (ValueError, AttributeError):
        return []
    return [r for r in runs if isinstance(r, str)] if isinstance(runs, list) else []


def _as_column(field, value):
    """``value`` as column ``field`` of a ledger table stores it through delta-rs, as Spark's append of its JSON
    (:meth:`EventWriter._insert`) would: a number or flag in a text column as its JSON text; anything else as it is
    (a value of the wrong type then fails the append)."""
    if value is not None and isinstance(field.dataType, StringType) and not isinstance(value, str):
        value = json_value(value)
        return value if isinstance(value, str) else json.dumps(value)
    return value


def _now() -> datetime:
    return datetime.now(timezone.utc)


class EventWriter:
    """Appends events to the ledger tables in ``schema`` behind the caller, and waits for their commits."""

    def __init__(self, spark: SparkSession, schema: str):
        self.spark = spark
        self.schema = schema
        self._queue: list[tuple[str, dict]] = []  # (table, row) in the order recorded
        self._writing = 0  # rows taken by the writer and not yet committed
        self._error: BaseException | None = None
        self._seq = 0
        self._committed = 0  # the highest seq committed
        self._lost_from: int | None = None  # the lowest seq of events whose commit failed
        self._cond = threading.Condition()
        self._writer: threading.Thread | None = None
        self._flushing = 0  # threads waiting in flush(): the writer stops lingering
        self._hurry = False  # write_now() was called: the writer stops lingering once
        self._on_commit: list[tuple[int, object]] = []  # (seq, callback) run by the writer once seq is committed
        #: per table: the run IDs of each commit this writer made, in order (see commit_mark); its lock is held
        #: across each INSERT into the table and the entry it adds
        self._commits: dict[str, list[frozenset]] = {name: [] for name in SCHEMAS}
        #: names this writer's commits (:func:`commit_tag`): two processes recording a plan of one run ID at once
        #: tell their commits apart by it (:meth:`planned_elsewhere_first`)
        self.token = uuid.uuid4().hex
        self._commit_locks = {name: threading.Lock() for name in SCHEMAS}
        #: the tables appended to and read through their files (:mod:`~backfill_lib.ledger.by_path`), by name; the
        #: others through Spark. Filled by ``Ledger.ensure``.
        self._by_path: dict[str, LedgerTable] = {}

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}"

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
        runs = frozenset(r.get("run_id") for r in rows)
        planned = {r["run_id"] for r in rows if name == "runs" and r.get("status") == "planned" and r.get("run_id")}
        files = self._by_path.get(name)
        if files is not None:
            schema = SCHEMAS[name]
            events = [{f.name: _as_column(f, r.get(f.name)) for f in schema.fields} for r in rows]
            with self._commit_locks[name]:
                files.append(events, commit_tag(runs, planned, self.token))
                self._commits[name].append(runs)
            return
        # One append of one string literal, the rows as a JSON array that from_json parses in the JVM: no Python
        # workers, one Delta commit, and a parse cost that stays flat with the rows (a VALUES clause of thousands of
        # check rows costs about twice as much; one row the same either way). FAILFAST: a value of the
        # wrong type fails the write (raised by the next flush) instead of being stored as NULL.
        schema = SCHEMAS[name]
        payload = json.dumps([{f.name: json_value(r.get(f.name)) for f in schema.fields} for r in rows])
        columns = ", ".join(f.name for f in schema.fields)
        array_type = f"array<{schema.simpleString()}>"
        from backfill_lib.adapters.session import COMMIT_CONFS

        rows_frame = self.spark.sql(
            f"SELECT {columns} FROM (SELECT inline(from_json({string_literal(payload)}, '{array_type}', "
            f"map('timestampFormat', {string_literal(JSON_TIMESTAMP_FORMAT)}, 'mode', 'FAILFAST'))))")
        # not while a publish's session confs are set: the append would commit with its txnAppId and txnVersion
        with self._commit_locks[name], COMMIT_CONFS.ledger_commit():
            # the commit names its runs and plans (planned_commits reads them back): an option of this write, not the
            # session's userMetadata, which a publish in another thread may set. writeTo's append matches columns
            # by name and fails on a missing table (saveAsTable would create a new one, without its properties).
            rows_frame.writeTo(self.table(name)).option("userMetadata", commit_tag(runs, planned, self.token)).append()
            self._commits[name].append(runs)

    def commit_mark(self, name: str) -> tuple[int, int] | None:
        """Table ``name``'s latest version and how many commits this writer has made to it, read while none of
        this writer's INSERTs into it is under way, for :meth:`only_commits_of`; ``None`` when the version cannot
        be read."""
        from backfill_lib.adapters.delta_log import current_version

        with self._commit_locks[name]:
            try:
                files = self._by_path.get(name)
                latest = files.version() if files is not None else current_version(self.spark, self.table(name))
                return latest, len(self._commits[name])
            except Exception:
                return None

    def only_commits_of(self, name: str, mark: tuple[int, int] | None, run_id: str) -> bool:
        """Whether every commit to table ``name`` since ``mark`` (:meth:`commit_mark`) was this writer's, holding
        events of ``run_id`` only: no other process or run has written to it since. ``False`` when unsure (no
        mark, a version that cannot be read, an INSERT that failed after its commit)."""
        now = self.commit_mark(name)
        if mark is None or now is None:
            return False
        since = self._commits[name][mark[1]:now[1]]
        return now[0] - mark[0] == len(since) and all(runs <= {run_id} for runs in since)

    def _runs_commits_after(self, mark: tuple[int, int]) -> list[tuple[int, str | None]]:
        """``(version, userMetadata)`` of the ``runs`` table's commits after ``mark`` (:meth:`commit_mark`), oldest
        first; through its files where local, else Spark. Raises the error of a failed read of its log."""
        from backfill_lib.adapters.delta_log import user_metadata_since

        files = self._by_path.get("runs")
        commits = (files.user_metadata_since(mark[0] + 1) if files is not None
                   else user_metadata_since(self.spark, self.table("runs"), mark[0] + 1))
        return sorted(commits)

    def planned_commits(self, mark: tuple[int, int] | None) -> dict[str, int]:
        """The version of the ``runs`` table whose commit holds each run's ``planned`` event, for the plans
        committed after ``mark`` (:meth:`commit_mark`), read from the commits' ``userMetadata``
        (:func:`commit_tag`; a few log files read in the driver). Plans in commits without a tag are missing;
        empty without a mark.

        Raises
        ------
        Exception
            The error of a failed read of the table's log (the caller's confirmation fails with it: one side of
            a race ordering by clock stamps while the other orders by commits could let both runs go on).
        """
        if mark is None:
            return {}
        found: dict[str, int] = {}
        for version, meta in self._runs_commits_after(mark):
            for run_id in tagged_runs(meta, PLANNED_KEY):
                found.setdefault(run_id, version)
        return found

    def planned_elsewhere_first(self, mark: tuple[int, int] | None, run_id: str) -> bool:
        """Whether the first commit after ``mark`` (:meth:`commit_mark`) holding a ``planned`` event of ``run_id``
        was another writer's: the same run ID started by another process at the same moment, whose plan reached
        the ledger first. ``False`` without a mark or when that commit names no writer (an older release's).

        Raises
        ------
        Exception
            The error of a failed read of the table's log.
        """
        if mark is None:
            return False
        for _, meta in self._runs_commits_after(mark):
            if run_id in tagged_runs(meta, PLANNED_KEY):
                writer = tag_writer(meta)
                return writer is not None and writer != self.token
        return False

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

    def wait_committed(self, seq: int, hurry: bool = True) -> None:
        """Wait until every event up to ``seq`` (from :meth:`recorded`) is committed; events recorded later keep
        lingering unless the writer takes them along. Safe from several threads at once. ``hurry=False`` leaves
        the writer lingering: the wait ends with the next commit another call starts (:meth:`write_now`,
        :meth:`flush`), so those events share it.

        Raises
        ------
        Exception
            The error of the failed ledger write that lost one of those events (it stays for :meth:`flush`).
        """
        with self._cond:
            while self._committed < seq and not self._lost(seq):
                if hurry and not self._hurry and any(row["seq"] <= seq for _, row in self._queue):
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
