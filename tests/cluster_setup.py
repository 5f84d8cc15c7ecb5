"""Creates the small tables of ``tests/e2e/test_cluster.py`` inside a ``spark-submit`` job.

``spark-submit ... tests/cluster_setup.py DB`` creates ``DB.events`` (``tests.fixtures.TARGET_ROWS``),
``DB.events_src`` (:data:`SOURCE`) and the mart ``DB.events_monthly`` in the catalog the spark-submit configuration names (the test passes its own
warehouse and Derby metastore, as a cluster's configuration would); the test knows the rows, so it can state
what the run must publish.
"""

from __future__ import annotations

import sys

from tests.fixtures import D9, D10, make_events, make_monthly

#: 2024-03-09 gets 4 rows (ids 3, 4, 5 changed, 10 new); 2024-03-10 (outside the request's range) a changed row
SOURCE = [(3, D9, 30), (4, D9, 40), (5, D9, 50), (10, D9, 100), (6, D10, 600)]


def create_tables(spark, db: str) -> None:
    """``CREATE SCHEMA IF NOT EXISTS db``, the target and source tables of :func:`tests.fixtures.make_events` and
    the mart of :func:`tests.fixtures.make_monthly`."""
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {db}")
    make_events(spark, db, SOURCE)
    make_monthly(spark, db)


if __name__ == "__main__":
    from backfill_lib.adapters.session import get_spark
    from backfill_lib.core.settings import load_settings

    create_tables(get_spark(load_settings()), sys.argv[1])
