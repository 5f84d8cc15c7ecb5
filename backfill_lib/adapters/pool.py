"""The Spark FAIR scheduler pool a run's concurrent work shares (``spark.scheduler.mode=FAIR`` in the local
session; on a cluster, the pool is created with default weights when the cluster's scheduler is FAIR)."""

from __future__ import annotations

import contextlib

from pyspark.sql import SparkSession

#: The FAIR scheduler pool that staged batches and concurrent audits run in.
POOL = "backfill"


def in_pool(spark: SparkSession, fn, *args):
    """``fn(*args)`` with this thread's Spark jobs in the FAIR pool :data:`POOL` (for work run in a thread)."""
    with contextlib.suppress(Exception):  # no SparkContext on Spark Connect: the default pool
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", POOL)
    return fn(*args)
