"""The ledger read from its files, without Spark: what ``backfill status`` shows on the embedded default.

On the embedded default the ledger tables are Delta tables at ``<home>/warehouse/<ledger_schema>.db/<table>`` and
the catalog is a Derby database that admits one process at a time. Reading the tables by path with delta-rs
(the ``deltalake`` package) needs neither a JVM nor the catalog, so ``backfill status`` answers in about a second,
also while a ``backfill run`` holds the home. A reader sees the latest commit of each table, as a Spark reader
would; the events a run still holds in memory (:mod:`backfill_lib.ledger.writer`) appear once that run flushes.

The folds are the same as :class:`~backfill_lib.ledger.store.Ledger`'s: a run's latest event by ``seq`` (its
``plan_json``: the latest non-null one); a partition's latest status, rows and message, its latest non-null batch,
attempt and rows, its first start and last end. Timestamps come back as pyspark returns them: naive datetimes in
this process's local time.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from backfill_lib.adapters.session import launched_by_spark_submit
from backfill_lib.core.errors import RunNotFoundError
from backfill_lib.core.settings import Settings
from backfill_lib.core.table_names import split_table_name

#: Settings' Spark options that move the warehouse or the catalog away from the embedded default's: with any of
#: them, the ledger's files are not where this module looks, and ``status`` reads through Spark.
_CATALOG_OPTION_WORDS = ("warehouse", "jdo", "metastore", "catalog")


def ledger_files(settings: Settings) -> LedgerFiles | None:
    """The ledger of the embedded default under ``settings.home``, read by path; ``None`` where the catalog is
    another one (under ``spark-submit``, on a Spark Connect server, with a ``metastore_url`` or settings that
    name a warehouse, metastore or catalog, or a ledger schema with a catalog part), where only Spark knows where the tables are; ``None`` too
    without the ``deltalake`` package (an install without the ``local`` extra)."""
    if importlib.util.find_spec("deltalake") is None:
        return None
    if launched_by_spark_submit() or os.environ.get("SPARK_REMOTE") or os.environ.get("SPARK_CONNECT_MODE_ENABLED"):
        return None
    if settings.metastore_url or any(word in key.lower() for key in settings.spark.options
                                     for word in _CATALOG_OPTION_WORDS):
        return None
    parts = split_table_name(settings.ledger_schema)
    if parts is None or len(parts) != 1:
        return None
    return LedgerFiles(settings.warehouse_dir, parts[0], settings.ledger_schema)


class LedgerFilesUnreadable(Exception):
    """delta-rs could not read a ledger table (a table feature it does not support, a damaged log): the caller
    reads the ledger through Spark instead."""


class LedgerFiles:
    """The ledger tables of schema ``schema`` under ``warehouse`` (``<warehouse>/<schema>.db/<table>``), read
    with delta-rs. A table that does not exist yet reads as empty. ``name`` is the schema as the settings spell it
    (for messages)."""

    def __init__(self, warehouse: Path, schema: str, name: str | None = None):
        self.folder = Path(warehouse) / f"{schema.lower()}.db"
        self.warehouse = Path(warehouse)
        self.name = name or schema

    def _rows(self, table: str, run_id: str | None = None, columns: list[str] | None = None) -> list[dict]:
        """The events of ledger table ``table`` (of ``run_id`` only, when given) as dicts."""
        path = self.folder / table
        if not (path / "_delta_log").is_dir():
            return []
        import pyarrow.compute as pc

        from backfill_lib.ledger.by_path import table_rows

        try:
            return table_rows(str(path), columns, None if run_id is None else pc.field("run_id") == run_id)
        except Exception as exc:  # delta-rs and arrow raise their own types; any of them means "read it with Spark"
            raise LedgerFilesUnreadable(f"{path}: {exc}") from exc

    @staticmethod
    def fold_runs(events: list[dict]) -> list[dict]:
        """Per run: its latest event by ``seq``, with the latest non-null ``plan_json`` when the events have it."""
        latest: dict[str, dict] = {}
        plans: dict[str, tuple[int, str]] = {}
        for event in events:
            run_id = event["run_id"]
            if run_id not in latest or event["seq"] > latest[run_id]["seq"]:
                latest[run_id] = event
            plan = event.get("plan_json")
            if plan is not None and (run_id not in plans or event["seq"] > plans[run_id][0]):
                plans[run_id] = (event["seq"], plan)
        folded = []
        for run_id, event in latest.items():
            record = dict(event)
            if "plan_json" in record:
                record["plan_json"] = plans.get(run_id, (0, None))[1]
            folded.append(record)
        return folded

    def latest_runs(self, limit: int = 20) -> list[dict]:
        """The latest record of each of the ``limit`` runs with the latest events, newest first, without their
        ``plan_json``."""
        from backfill_lib.ledger.schema import RUNS_SCHEMA

        columns = [f.name for f in RUNS_SCHEMA.fields if f.name != "plan_json"]
        runs = self.fold_runs(self._rows("runs", columns=columns))
        return sorted(runs, key=lambda r: r["seq"], reverse=True)[:limit]

    def run(self, run_id: str) -> dict:
        """The latest record of ``run_id``; raises :class:`RunNotFoundError` when the ledger has none."""
        folded = self.fold_runs(self._rows("runs", run_id))
        if not folded:
            raise RunNotFoundError(f"run {run_id} not found in ledger {self.name}.runs")
        return folded[0]

    def partitions(self, run_id: str) -> list[dict]:
        """Every partition of ``run_id``, ordered by partition (the fold of
        :meth:`~backfill_lib.ledger.store.Ledger.partitions`)."""
        by_partition: dict[str, list[dict]] = {}
        for event in self._rows("partitions", run_id):
            by_partition.setdefault(event["partition"], []).append(event)
        folded = []
        for partition, events in sorted(by_partition.items()):
            events.sort(key=lambda e: e["seq"])
            last = events[-1]
            record = {"run_id": run_id, "partition": partition,
                      **{c: last.get(c) for c in ("status", "message", "seq", "event_at")}}
            for c in ("batch", "attempt", "rows"):
                record[c] = next((e[c] for e in reversed(events) if e.get(c) is not None), None)
            starts = [e["started_at"] for e in events if e.get("started_at") is not None]
            ends = [e["ended_at"] for e in events if e.get("ended_at") is not None]
            record["started_at"] = min(starts) if starts else None
            record["ended_at"] = max(ends) if ends else None
            folded.append(record)
        return folded

    def staging_kept(self, names: list[str | None]) -> set[str]:
        """Which of the staging tables ``names`` (``schema.table``) are still there: a managed table of the
        embedded default is a folder of the warehouse, dropped with it. A name of another form counts as gone."""
        kept = set()
        for name in {n for n in names if n}:
            parts = split_table_name(name)
            if parts and len(parts) == 2:
                schema, table = (p.lower() for p in parts)
                if (self.warehouse / f"{schema}.db" / table / "_delta_log").is_dir():
                    kept.add(name)
        return kept

    def find_run(self, run_id: str) -> dict | None:
        """The latest record of ``run_id``, or ``None`` when the ledger has none."""
        try:
            return self.run(run_id)
        except RunNotFoundError:
            return None

    def partition_rows(self, run_id: str) -> dict[str, int | None]:
        """Rows by partition key of every partition of ``run_id`` (its latest event that had rows)."""
        return {p["partition"]: p["rows"] for p in self.partitions(run_id)}

    def checks(self, run_id: str) -> list[dict]:
        """The checks of ``run_id``'s latest validation, in the order written (the fold of
        :meth:`~backfill_lib.ledger.store.Ledger.checks`)."""
        since = max((e["seq"] for e in self._rows("runs", run_id, ["run_id", "seq", "status"])
                     if e["status"] == "validating"), default=0)
        return sorted((c for c in self._rows("checks", run_id) if c["seq"] > since), key=lambda c: c["seq"])

    def recorded_checks(self, run_id: str) -> tuple:
        """:meth:`checks` as :class:`~backfill_lib.core.checks.Check` objects, in the order written."""
        from backfill_lib.core.checks import Check

        return tuple(Check(c["kind"], c["name"], c["success"], c["partition"], c["batch"], c["observed"],
                           c["expected"], c["message"]) for c in self.checks(run_id))

    def diffs(self, run_id: str) -> list[dict]:
        """The latest diff of every partition of ``run_id``, ordered by partition."""
        latest: dict[str, dict] = {}
        for d in self._rows("diffs", run_id):
            if d["partition"] not in latest or d["seq"] > latest[d["partition"]]["seq"]:
                latest[d["partition"]] = d
        return [latest[p] for p in sorted(latest)]
