"""Benchmark: the ledger at the size of a team's year (10,000 runs, a million partition events).

From the project root::

    python tests/benchmarks/bench_ledger_scale.py [--sizes 100 1000 10000] [--partitions 100] [--home DIR]

One local session (``local[2]``, a fresh home) creates the test suite's events table and runs one real recompute
(``tests/fixtures.py``), so that the ledger's tables and one real plan exist. The script then copies that run's
events into generated runs (new run IDs, 100 days each, ``--partitions`` partition events each, a tenth of them
of the real run's request on the events table and the rest of nine other requests and tables, all final) until the ledger holds each of ``--sizes`` runs,
appending with delta-rs, one commit per 500 runs. At each size it prints the seconds of what a user waits for:

- ``lease``: the lease check a run makes before staging (``Ledger.leases`` of the events table, by path);
- ``only missing``: ``--only missing``'s ledger read (``request_runs``: the request's runs and plans, Spark);
- ``history``: ``backfill history``'s ledger read (``backfill_versions``: the table's log and the runs' statuses);
- ``status`` and ``status RUN``: the ``backfill status`` commands as typed (a new process, no JVM: by path).

Each is timed three times on the warm session; the best is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
#: runs per delta-rs commit of the generated events
RUNS_PER_COMMIT = 500


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--home", default=None)
    args = parser.parse_args()
    home = Path(args.home or tempfile.mkdtemp(prefix="bench-ledger-"))
    os.environ["BACKFILL_HOME"] = str(home)
    os.environ["BACKFILL_SPARK_MASTER"] = "local[2]"
    os.chdir(ROOT)

    from backfill_lib.adapters.session import get_spark
    from backfill_lib.api import history, run_backfill
    from backfill_lib.core.settings import load_settings
    from backfill_lib.ledger import Ledger
    from backfill_lib.plan.selection import request_runs
    from tests.fixtures import FULL_SOURCE, events_request, make_events

    settings = load_settings()
    spark = get_spark(settings)
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    spark.sql("CREATE SCHEMA IF NOT EXISTS scale")
    make_events(spark, "scale", FULL_SOURCE)
    request = events_request(home, "scale", batch_size=1)
    run_backfill(request, settings=settings, spark=spark, run_id="real")
    ledger_dir = home / "warehouse" / f"{settings.ledger_schema}.db"
    template = {name: _rows(ledger_dir / name, "real") for name in ("runs", "partitions", "checks", "diffs")}
    request_name = template["runs"][0]["request_name"]

    made = 1
    print(f"{'runs':>6} {'partition events':>16} {'lease':>7} {'only missing':>12} {'history':>8} {'status':>7} "
          f"{'status RUN':>10}  (seconds, best of 3)")
    for size in args.sizes:
        while made < size:
            count = min(RUNS_PER_COMMIT, size - made)
            _append(ledger_dir, template, range(made, made + count), args.partitions)
            made += count
        ledger = Ledger(spark, settings.ledger_schema)
        ledger.ensure()
        middle = f"gen_{size // 2:05d}"
        timings = [
            _best(lambda: ledger.leases("scale.events")),
            _best(lambda: request_runs(spark, ledger, request_name, "scale.events")),
            _best(lambda: history("scale.events", settings=settings, spark=spark)),
            _best(lambda: _command("status")),
            _best(lambda: _command("status", middle)),
        ]
        events = len(template["partitions"]) + (made - 1) * args.partitions
        print(f"{made:>6} {events:>16,} " + " ".join(f"{t:>{w}.2f}" for t, w in zip(timings, (7, 12, 8, 7, 10))),
              flush=True)


def _rows(path: Path, run_id: str) -> list[dict]:
    from deltalake import DeltaTable

    return [r for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist() if r["run_id"] == run_id]


def _append(ledger_dir: Path, template: dict[str, list[dict]], numbers: range, partitions: int) -> None:
    """Append generated runs ``numbers`` to every ledger table, one delta-rs commit per table."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    for name, rows in template.items():
        table = DeltaTable(str(ledger_dir / name))
        schema = table.schema().to_arrow() if hasattr(table.schema(), "to_arrow") else table.schema().to_pyarrow()
        out = []
        for n in numbers:
            out.extend(_generated(name, rows, n, partitions))
        if out:
            write_deltalake(str(ledger_dir / name), pa.Table.from_pylist(out, schema=pa.schema(schema)), mode="append")


def _generated(name: str, rows: list[dict], n: int, partitions: int) -> list[dict]:
    """Run ``n``'s events copied from the real run's ``rows``: run ID ``gen_NNNNN``, sequence numbers and times
    shifted by ``n`` hours, its target one of ten names, ``partitions`` partition events over 100 days."""
    run_id, shift = f"gen_{n:05d}", timedelta(hours=n)
    target = "scale.events" if n % 10 == 0 else f"scale.other_{n % 10}"
    base = [{**r, "run_id": run_id, "seq": r["seq"] + n * 3_600_000_000_000,
             "event_at": r["event_at"] + shift} for r in rows]
    if name == "runs":
        for r in base:
            r["target_table"] = target
            if n % 10:
                r["request_name"] = f"other_{n % 10}"
            r["staging_table"] = f"backfill_staging.scale__events__{run_id}"
            if r.get("plan_json"):
                plan = json.loads(r["plan_json"])
                plan["run_id"] = run_id
                r["plan_json"] = json.dumps(plan)
        return base
    if name == "partitions" and base:
        first = base[0]
        day0 = n % 265
        return [{**first, "partition": f"2024-{1 + (day0 + i) // 28 % 12:02d}-{1 + (day0 + i) % 28:02d}",
                 "status": "staged" if i % 2 else "staging", "seq": first["seq"] + i, "batch": i // 2}
                for i in range(partitions)]
    return base


def _best(step) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return min(times)


def _command(*args: str) -> None:
    done = subprocess.run([str(Path(sys.executable).parent / "backfill"), *args], cwd=ROOT, capture_output=True,
                          text=True, env=os.environ)
    if done.returncode != 0:
        raise SystemExit(f"backfill {' '.join(args)}: exit {done.returncode}: {done.stderr[-500:]}")


if __name__ == "__main__":
    main()
