"""One aggregation of the staged rows per partition for every audit that aggregates per partition.

The row counts and checksums the post-publish check reuses, each reconciliation rule's staged metric, each metric
rule's metrics and the counts of the target's constraints all group the staged rows by the same partition
expression. :class:`SharedPass` collects their aggregate columns and computes them in one
``groupBy(partition).agg(...)`` (one Spark job, one read of the staged rows) instead of one job each; every audit
then reads its own columns back from the collected rows, exactly as it would from its own aggregation.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame

from backfill_lib.core.errors import RequestError, first_line
from backfill_lib.core.partition_keys import PartitionKeys


class SharedPass:
    """Aggregate columns of several audits over ``df`` grouped by ``keys.expr()``, computed once.

    Register every audit's columns with :meth:`add` before :meth:`run` or the first :meth:`rows`, which runs the
    aggregation (thread-safe: audits in other threads wait for it). A partition with no staged rows has no row.
    The aggregation runs once even when it fails: every later reader gets the same error.
    """

    def __init__(self, df: DataFrame, keys: PartitionKeys):
        self.df = df
        self.keys = keys
        self._columns: list[Column] = []
        self._names: list[list[str]] = []
        self._labels: list[str | None] = []
        self._owners: list[int] = []  # the handle of each column
        self._rows: list | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def add(self, aggregates: Sequence[Column], names: Sequence[str], label: str | None = None) -> int:
        """Register ``aggregates`` (aggregate columns of ``df``), read back under ``names`` (same order, unique
        within the call); returns the handle for :meth:`rows`. ``label`` names what the user wrote them from
        (``"r.yml: field 'reconciliation.0.metric': 'sum(v)' of db.t"``): when the aggregation fails on the data,
        the first labelled handle whose columns fail alone is named in the error (see :meth:`run`)."""
        if self._rows is not None or self._error is not None:
            raise RuntimeError("SharedPass: columns added after the aggregation ran")
        handle = len(self._names)
        self._names.append(list(names))
        self._labels.append(label)
        # positional aliases: names of different audits may collide, and may hold any character
        self._columns += [c.alias(f"_a{handle}_{i}") for i, c in enumerate(aggregates)]
        self._owners += [handle] * len(aggregates)
        return handle

    def run(self) -> None:
        """Run the aggregation now (once; later calls and :meth:`rows` reuse its rows, or raise its error again).
        With no column added, no Spark job runs.

        Raises
        ------
        RequestError
            When the aggregation fails on the data (a cast of a value that is not a number, a division by zero
            under ANSI mode) and a labelled handle's columns fail alone: ``"{label} failed on the staged rows;
            nothing was published: {Spark's first line}"``. Each labelled handle is then tried in turn, one Spark
            job each, only on this path. Any other failure is raised as Spark raised it.
        """
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._rows is None:
                try:
                    self._rows = self._aggregate(self._columns) if self._columns else []
                except Exception as exc:
                    self._error = (self._named() if isinstance(exc, PySparkException) else None) or exc
                    raise self._error from None

    def _aggregate(self, columns: Sequence[Column]) -> list:
        return self.df.groupBy(self.keys.expr().alias("p")).agg(*columns).collect()

    def _named(self) -> RequestError | None:
        """The :class:`RequestError` of the first labelled handle whose columns fail alone, or ``None``."""
        for handle, label in enumerate(self._labels):
            if label is None:
                continue
            try:
                self._aggregate([c for c, owner in zip(self._columns, self._owners) if owner == handle])
            except PySparkException as exc:
                return RequestError(f"{label} failed on the staged rows; nothing was published: {first_line(exc)}")
        return None

    def rows(self, handle: int) -> list[dict]:
        """The aggregated rows for ``handle``: one dict per partition value, ``p`` (the raw value of
        ``keys.expr()``, as a separate ``groupBy(keys.expr().alias("p"))`` gives it) and the handle's names."""
        self.run()
        names = self._names[handle]
        return [{"p": r["p"], **{n: r[f"_a{handle}_{i}"] for i, n in enumerate(names)}} for r in self._rows]
