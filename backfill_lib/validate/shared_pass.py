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

from pyspark.sql import Column, DataFrame

from backfill_lib.core.partition_keys import PartitionKeys


class SharedPass:
    """Aggregate columns of several audits over ``df`` grouped by ``keys.expr()``, computed once.

    Register every audit's columns with :meth:`add` before :meth:`run` or the first :meth:`rows`, which runs the
    aggregation (thread-safe: audits in other threads wait for it). A partition with no staged rows has no row.
    """

    def __init__(self, df: DataFrame, keys: PartitionKeys):
        self.df = df
        self.keys = keys
        self._columns: list[Column] = []
        self._names: list[list[str]] = []
        self._rows: list | None = None
        self._lock = threading.Lock()

    def add(self, aggregates: Sequence[Column], names: Sequence[str]) -> int:
        """Register ``aggregates`` (aggregate columns of ``df``), read back under ``names`` (same order, unique
        within the call); returns the handle for :meth:`rows`."""
        if self._rows is not None:
            raise RuntimeError("SharedPass: columns added after the aggregation ran")
        handle = len(self._names)
        self._names.append(list(names))
        # positional aliases: names of different audits may collide, and may hold any character
        self._columns += [c.alias(f"_a{handle}_{i}") for i, c in enumerate(aggregates)]
        return handle

    def run(self) -> None:
        """Run the aggregation now (once; later calls and :meth:`rows` reuse its rows). With no column added,
        no Spark job runs."""
        with self._lock:
            if self._rows is None:
                self._rows = (self.df.groupBy(self.keys.expr().alias("p")).agg(*self._columns).collect()
                              if self._columns else [])

    def rows(self, handle: int) -> list[dict]:
        """The aggregated rows for ``handle``: one dict per partition value, ``p`` (the raw value of
        ``keys.expr()``, as a separate ``groupBy(keys.expr().alias("p"))`` gives it) and the handle's names."""
        self.run()
        names = self._names[handle]
        return [{"p": r["p"], **{n: r[f"_a{handle}_{i}"] for i, n in enumerate(names)}} for r in self._rows]
