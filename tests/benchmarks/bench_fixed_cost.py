"""Benchmark: the fixed cost of one run, where a run's own work is nothing (a tiny recompute, 3 days, 5 rows).

From the project root::

    python tests/benchmarks/bench_fixed_cost.py [--runs 6] [--code DIR] [--staging auto durable pinned]

One local session (``local[2]``, a fresh home in a temporary folder, 2 shuffle partitions as the tests use) runs
``--runs`` recomputes of the test suite's events table (``tests/fixtures.py``), each on new tables, through
``prepare`` + ``Runner.run``, and prints per run: seconds for ``prepare`` and for ``run``, the load average, and
the seconds spent in the ledger's reads and waits (wall time in any thread, so a background read counts though it
may overlap other work). The first run pays the session's cold start (GX import, the ledger's creation, JIT);
report the median of the others. ``--staging`` names the staging modes the runs take in turn (one, or several
for an A/B of the modes in one session); the median is then printed per mode, without each mode's first run. ``--code DIR`` imports ``backfill_lib`` and ``tests`` from another checkout, for
A/B runs of two checkouts alternately in one sitting.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--code", default=str(Path(__file__).resolve().parents[2]))
    parser.add_argument("--staging", nargs="+", choices=("auto", "durable", "pinned"), default=["auto"])
    args = parser.parse_args()
    os.environ["BACKFILL_HOME"] = tempfile.mkdtemp(prefix="bench-fixed-")
    os.environ["BACKFILL_SPARK_MASTER"] = "local[2]"
    sys.path.insert(0, args.code)
    os.chdir(args.code)

    from backfill_lib.adapters.session import get_spark
    from backfill_lib.adapters.session import quiet_spark_query_errors
    from backfill_lib.core.settings import load_settings
    from backfill_lib.ledger.store import Ledger
    from backfill_lib.ledger.writer import EventWriter
    from backfill_lib.runner import prepare
    from tests.conftest import quiet_runner
    from tests.fixtures import D8, D10, events_request, make_events

    settings = load_settings("conf/settings.yml")
    spark = get_spark(settings)
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    quiet_spark_query_errors()
    spent: collections.Counter = collections.Counter()

    def timed(cls, name: str) -> None:
        method = getattr(cls, name)

        @functools.wraps(method)
        def wrapper(*a, **k):
            started = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                spent[name] += time.perf_counter() - started

        setattr(cls, name, wrapper)

    for name in ("leases", "abandoned_event", "ensure"):
        timed(Ledger, name)
    for name in ("flush", "wait_committed"):
        timed(EventWriter, name)

    source = [(3, D8, 30), (4, D8, 40), (6, D10, 600)]
    runs = []
    by_mode: dict[str, list[float]] = collections.defaultdict(list)
    for i in range(args.runs):
        mode = args.staging[i % len(args.staging)]
        spent.clear()
        db = f"fixed_{uuid.uuid4().hex[:8]}"
        spark.sql(f"CREATE SCHEMA {db}")
        make_events(spark, db, source)
        request = events_request(Path(tempfile.mkdtemp()), db, start=D8, end=D10, gates={"allow_row_loss": True},
                                 staging=mode)
        started = time.perf_counter()
        plan, state = prepare(spark, settings, request)
        prepared = time.perf_counter() - started
        result = quiet_runner(spark, settings).run(plan, state)
        ran = time.perf_counter() - started - prepared
        runs.append(ran)
        by_mode[mode].append(ran)
        ledger = ", ".join(f"{k} {v:.2f}" for k, v in spent.most_common())
        print(f"run {i} ({mode}): prepare {prepared:.2f} s, run {ran:.2f} s ({result.status}), load "
              f"{os.getloadavg()[0]:.1f}; ledger: {ledger}", flush=True)
    if len(runs) > 1:
        print(f"median run after the first: {statistics.median(runs[1:]):.2f} s ({args.code})")
    for mode, times in by_mode.items():
        if len(times) > 1:
            print(f"median {mode} run after its first: {statistics.median(times[1:]):.2f} s")
    spark.stop()


if __name__ == "__main__":
    main()
