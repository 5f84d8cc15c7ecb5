"""(d) in fresh processes: the row-level case as a user's commands meet it, each in a new JVM.

The in-process (d) of ``bench_backfill.py`` runs bare, full and bare in one session: its bare runs follow the
untimed write that puts the defect back (the same query shape), so their code is already compiled, while the full
run is the session's first use of its own (hashing, the diff, GX). A command typed by a user starts a new JVM
either way. Here each step is its own process (``python -m tests.benchmarks.bench_fresh STEP BENCH-ARGS...``, run
by :func:`bench_fresh` with the benchmark's own arguments): the defect put back, then bare, full and bare, each
timed from its statement on (Spark's start and ``import great_expectations`` are reported apart), with the CPU
time the JVM's just-in-time compilers spent during it.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the line a step prints its figures on
MARK = "FRESH-RESULT "


def _jit_seconds(spark) -> float:
    """CPU seconds the JVM's just-in-time compilers spent since it started."""
    bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
    return bean.getTotalCompilationTime() / 1000


def step(name: str, argv: list[str]) -> dict:
    """Run one step (``defect``, ``bare`` or ``full``) of (d) for its first span in this process."""
    from tests.benchmarks import bench_backfill as B
    from tests.benchmarks import bench_rows as R

    args = B.parse_args(argv)
    os.environ["BACKFILL_SPARK_MASTER"] = args.master
    settings = B.make_settings(args)
    from backfill_lib.adapters.session import get_spark

    started = time.perf_counter()
    spark = get_spark(settings)
    out = {"step": name, "spark_start_s": round(time.perf_counter() - started, 3)}
    start, end = date(args.year, 1, 1), date(args.year + args.years[0], 1, 1)
    target, bare_table = f"{B.SCHEMA}.lineitem_net", f"{B.SCHEMA}.lineitem_net_bare"
    predicate = f"l_shipdate >= DATE'{start}' AND l_shipdate < DATE'{end}'"
    sql = R.rows_sql(B.SCHEMA, R.CORRECT)
    try:
        if name == "defect":
            spark.sql(f"CREATE SCHEMA IF NOT EXISTS {B.SCHEMA}")
            B.ensure_lineitem_table(spark, B.ensure_lineitem_parquet(
                args.scale, Path(args.data_dir) if args.data_dir else settings.home / "bench" / "tpch"), args.reload)
            R.ensure_rows_tables(spark, B.SCHEMA, args.reload)
            R.put_back_defect(spark, B.SCHEMA, target, start, end)
            return out
        jit = _jit_seconds(spark)
        if name == "bare":
            out["seconds"] = round(B.run_bare(spark, sql, start, end, bare_table, predicate), 3)
        else:
            from backfill_lib.ledger import Ledger

            started = time.perf_counter()
            importlib.import_module("great_expectations")  # one-time per process: reported apart, as in the benchmark

            out["import_great_expectations_s"] = round(time.perf_counter() - started, 3)
            spark.sql(f"CREATE SCHEMA IF NOT EXISTS {B.STAGING_SCHEMA}")
            Ledger(spark, B.LEDGER_SCHEMA).ensure()
            request = B.write_request(
                settings.home / "bench" / "requests", "lineitem_net_fresh", sql, R.ROWS_SUITE,
                target={"table": target, "partition_column": "l_shipdate", "grain": "day"},
                range={"start": start.isoformat(), "end": date.fromordinal(end.toordinal() - 1).isoformat()},
                time_zone="UTC", keys=["l_orderkey", "l_linenumber"], reconciliation=R.rows_reconciliation(B.SCHEMA),
                **B.request_extras(args))
            jit = _jit_seconds(spark)
            seconds, detail = B.run_full(spark, settings, request)
            out.update({"seconds": round(seconds, 3), "prepare_s": detail["prepare_s"], "run_id": detail["run_id"]})
            B.drop_staging(spark, detail, args.keep_staging)
        out["jit_cpu_s"] = round(_jit_seconds(spark) - jit, 1)
        out["load_avg_1m"] = round(os.getloadavg()[0], 2)
        return out
    finally:
        spark.stop()


def bench_fresh(argv: list[str], say) -> dict:
    """The defect put back, then bare, full and bare, each in a new process; the full run's ratio to the bare
    runs' mean."""
    steps = {}
    for name, label in (("defect", "defect"), ("bare", "bare_before"), ("full", "full"), ("bare", "bare_after")):
        say(f"(d) in a fresh process: {label}")
        done = subprocess.run([sys.executable, "-m", "tests.benchmarks.bench_fresh", name, *argv], cwd=ROOT,
                              capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
        if done.returncode or not lines:
            raise SystemExit(f"fresh step {name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        steps[label] = json.loads(lines[-1][len(MARK):])
    bare_mean = (steps["bare_before"]["seconds"] + steps["bare_after"]["seconds"]) / 2
    return {**steps, "bare_mean_s": round(bare_mean, 3),
            "ratio_full_over_bare": round(steps["full"]["seconds"] / bare_mean, 2)}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(MARK + json.dumps(step(sys.argv[1], sys.argv[2:])), flush=True)
