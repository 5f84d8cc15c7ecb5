"""(a) and (d) in fresh processes: the aggregate and row-level cases as a user's commands meet them, each in a new
JVM.

The in-process (a) and (d) of ``bench_backfill.py`` run bare, full and bare in one session: the bare runs follow
the untimed write that puts the defect back (a query of the same shape), so their code is already compiled, while
the full run is the session's first use of its own (hashing, the diff, GX). A command typed by a user starts a new
JVM either way. Here each step is its own process (``python -m tests.benchmarks.bench_fresh CASE STEP
BENCH-ARGS...``, run
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
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the line a step prints its figures on
MARK = "FRESH-RESULT "


def _jit_seconds(spark) -> float:
    """CPU seconds the JVM's just-in-time compilers spent since it started."""
    bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
    return bean.getTotalCompilationTime() / 1000


def _case(case: str, B, R) -> dict:
    """What a case's steps use: its target and bare copy, its SQL, suite, keys and reconciliation, and how its
    defect is put back over ``[start, end)``."""
    if case == "a":
        target = f"{B.SCHEMA}.daily_shipments"

        def defect(spark, start, end):
            predicate = f"l_shipdate >= DATE'{start}' AND l_shipdate < DATE'{end}'"
            for name in (target, f"{target}_bare"):
                if not spark.catalog.tableExists(name):
                    spark.sql(B.DAILY_INITIAL_SQL).write.format("delta").partitionBy("l_shipdate").saveAsTable(name)
            (spark.sql(B.DAILY_INITIAL_SQL).where(predicate).write.format("delta").mode("overwrite")
             .option("replaceWhere", predicate).saveAsTable(target))

        return {"target": target, "sql": B.DAILY_SQL, "suite": B.DAILY_SUITE, "reconciliation": B.DAILY_RECONCILIATION,
                "keys": ["l_shipdate", "l_returnflag", "l_linestatus"], "defect": defect, "years": 1}
    target = f"{B.SCHEMA}.lineitem_net"

    def defect(spark, start, end):
        R.ensure_rows_tables(spark, B.SCHEMA, False)
        R.put_back_defect(spark, B.SCHEMA, target, start, end)

    return {"target": target, "sql": R.rows_sql(B.SCHEMA, R.CORRECT), "suite": R.ROWS_SUITE,
            "reconciliation": R.rows_reconciliation(B.SCHEMA), "keys": ["l_orderkey", "l_linenumber"],
            "defect": defect, "years": None}


def step(case: str, name: str, argv: list[str]) -> dict:
    """Run one step (``defect``, ``bare`` or ``full``) of ``case`` (``a``: the aggregate; ``d``: the row-level
    case over its first span) in this process."""
    from tests.benchmarks import bench_backfill as B
    from tests.benchmarks import bench_rows as R

    args = B.parse_args(argv)
    os.environ["BACKFILL_SPARK_MASTER"] = args.master
    settings = B.make_settings(args)
    from backfill_lib.adapters.session import get_spark

    started = time.perf_counter()
    spark = get_spark(settings)
    out = {"step": name, "spark_start_s": round(time.perf_counter() - started, 3)}
    c = _case(case, B, R)
    start = date(args.year, 1, 1)
    end = date(args.year + (c["years"] or args.years[0]), 1, 1)
    target = c["target"]
    predicate = f"l_shipdate >= DATE'{start}' AND l_shipdate < DATE'{end}'"
    try:
        if name == "defect":
            spark.sql(f"CREATE SCHEMA IF NOT EXISTS {B.SCHEMA}")
            B.ensure_lineitem_table(spark, B.ensure_lineitem_parquet(
                args.scale, Path(args.data_dir) if args.data_dir else settings.home / "bench" / "tpch"), args.reload)
            c["defect"](spark, start, end)
            return out
        if name == "bare":
            jit = _jit_seconds(spark)
            out["seconds"] = round(B.run_bare(spark, c["sql"], start, end, f"{target}_bare", predicate), 3)
        else:
            from backfill_lib.ledger import Ledger

            started = time.perf_counter()
            importlib.import_module("great_expectations")  # one-time per process: reported apart, as in the benchmark
            out["import_great_expectations_s"] = round(time.perf_counter() - started, 3)
            spark.sql(f"CREATE SCHEMA IF NOT EXISTS {B.STAGING_SCHEMA}")
            Ledger(spark, B.LEDGER_SCHEMA).ensure()
            request = B.write_request(
                settings.home / "bench" / "requests", f"{target.split('.')[-1]}_fresh", c["sql"], c["suite"],
                target={"table": target, "partition_column": "l_shipdate", "grain": "day"},
                range={"start": start.isoformat(), "end": (end - timedelta(days=1)).isoformat()},
                time_zone="UTC", keys=c["keys"], reconciliation=c["reconciliation"], **B.request_extras(args))
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
    """Per case (``a``, ``d``): the defect put back, then bare, full and bare, each in a new process; the full
    run's ratio to the bare runs' mean."""
    results = {}
    for case in ("a", "d"):
        steps = {}
        for name, label in (("defect", "defect"), ("bare", "bare_before"), ("full", "full"), ("bare", "bare_after")):
            say(f"({case}) in a fresh process: {label}")
            done = subprocess.run([sys.executable, "-m", "tests.benchmarks.bench_fresh", case, name, *argv],
                                  cwd=ROOT, capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
            if done.returncode or not lines:
                raise SystemExit(f"fresh step ({case}) {name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
            steps[label] = json.loads(lines[-1][len(MARK):])
        bare_mean = (steps["bare_before"]["seconds"] + steps["bare_after"]["seconds"]) / 2
        results[case] = {**steps, "bare_mean_s": round(bare_mean, 3),
                         "ratio_full_over_bare": round(steps["full"]["seconds"] / bare_mean, 2)}
    return results


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(MARK + json.dumps(step(sys.argv[1], sys.argv[2], sys.argv[3:])), flush=True)
