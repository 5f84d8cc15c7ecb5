"""Row-level benchmarks (d) and (e) of ``bench_backfill.py``: a target as large as its source.

(d) **Row-level recompute.** ``bench.lineitem_net`` has one row per ``lineitem`` line (keys ``l_orderkey,
    l_linenumber``), partitioned by ``l_shipdate``, with one derived column, ``l_net_price``, built for every date
    with a defect (taken from ``l_tax`` instead of ``l_discount``). One year is recomputed by the full pipeline
    and by the bare ``replaceWhere`` of the same SQL into a copy (bare, full, bare, as in (a)).
(e) **Scale curve.** The same over 1, 2 and 4 years (``--years``): seconds per million rows for full and bare,
    their ratio, and the driver's peak memory: the JVM's heap (sum of its pools' peak usage, reset before each
    run; local mode, so executors' work is in it too) and the resident set high-water marks of the JVM and of
    Python (``VmHWM``, reset through ``/proc/PID/clear_refs``).

Before each full run the range is put back to the defect (not timed), so every run changes every row.
"""

from __future__ import annotations

import os
from datetime import date, timedelta
from pathlib import Path

#: lineitem's own columns, in tpchgen-cli's order
LINEITEM = ("l_orderkey, l_partkey, l_suppkey, l_linenumber, l_quantity, l_extendedprice, l_discount, l_tax, "
            "l_returnflag, l_linestatus, l_shipdate, l_commitdate, l_receiptdate, l_shipinstruct, l_shipmode, "
            "l_comment")


def rows_sql(schema: str, net: str, ranged: bool = True) -> str:
    where = "\nWHERE l_shipdate >= :range_start AND l_shipdate < :range_end" if ranged else ""
    return f"SELECT {LINEITEM},\n       {net} AS l_net_price\nFROM {schema}.lineitem{where}\n"


CORRECT = "l_extendedprice * (1 - l_discount)"
DEFECT = "l_extendedprice * (1 - l_tax)"

ROWS_SUITE = {
    "name": "lineitem_net",
    "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "l_orderkey"}},
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "l_linenumber"}},
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "l_shipdate", "min_value": {"$PARAMETER": "batch_start"},
                    "max_value": {"$PARAMETER": "batch_last"}}},
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "l_net_price", "min_value": 0}},
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "l_discount", "min_value": 0,
                                                                  "max_value": 0.1}},
    ],
}


def rows_reconciliation(schema: str) -> list[dict]:
    """The (d) request's reconciliation rules: ``count(*)`` and ``sum(l_quantity)`` against ``lineitem``."""
    return [{"name": name, "metric": metric,
             "source": {"table": f"{schema}.lineitem", "partition_column": "l_shipdate", "metric": metric}}
            for name, metric in (("lines_equal_lineitem", "count(*)"), ("quantity_equals_lineitem", "sum(l_quantity)"))]


class PeakMemory:
    """Peak memory of the driver over one block: JVM heap pools' peak usage and the resident set high-water
    marks of the JVM and this Python process, each reset at :meth:`reset`."""

    def __init__(self, spark) -> None:
        self.jvm = spark.sparkContext._jvm
        self.jvm_pid = int(self.jvm.java.lang.ProcessHandle.current().pid())

    def _pools(self):
        pools = self.jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
        return [p for p in pools if str(p.getType()) == "Heap memory"]

    @staticmethod
    def _hwm_mib(pid: int | str) -> float | None:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
        except OSError:
            return None
        return None

    def reset(self) -> None:
        self.jvm.java.lang.System.gc()
        for pool in self._pools():
            pool.resetPeakUsage()
        for pid in (self.jvm_pid, "self"):
            try:
                Path(f"/proc/{pid}/clear_refs").write_text("5")  # 5: reset the peak resident set size
            except OSError:
                pass

    def read(self) -> dict:
        heap = sum(int(p.getPeakUsage().getUsed()) for p in self._pools())
        return {"jvm_heap_peak_mib": round(heap / 2**20, 1), "jvm_rss_hwm_mib": self._hwm_mib(self.jvm_pid),
                "python_rss_hwm_mib": self._hwm_mib("self")}


def ensure_rows_tables(spark, schema: str, reload: bool) -> tuple[str, str]:
    """``<schema>.lineitem_net`` (every date, with the defect) and its copy ``<schema>.lineitem_net_bare``."""
    target, bare = f"{schema}.lineitem_net", f"{schema}.lineitem_net_bare"
    if reload or not (spark.catalog.tableExists(target) and spark.catalog.tableExists(bare)):
        for name in (target, bare):
            spark.sql(f"DROP TABLE IF EXISTS {name}")
        initial = spark.sql(rows_sql(schema, DEFECT, ranged=False))
        initial.repartition("l_shipdate").write.format("delta").partitionBy("l_shipdate").saveAsTable(target)
        spark.table(target).write.format("delta").partitionBy("l_shipdate").saveAsTable(bare)
    return target, bare


def put_back_defect(spark, schema: str, target: str, start: date, end: date) -> None:
    """Overwrite ``[start, end)`` of ``target`` with the defect rows (not timed), so a full run changes every row."""
    predicate = f"l_shipdate >= DATE'{start}' AND l_shipdate < DATE'{end}'"
    defect = spark.sql(rows_sql(schema, DEFECT), args={"range_start": start, "range_end": end})
    defect.write.format("delta").mode("overwrite").option("replaceWhere", predicate).saveAsTable(target)


def bench_rows(spark, settings, args, bench_dir: Path, *, schema: str, bracketed, write_request, request_extras,
               drop_staging, say) -> dict:
    """(d) and (e): one bracketed run per entry of ``args.years`` (years from ``args.year`` on); the first is (d)."""
    target, bare_table = ensure_rows_tables(spark, schema, args.reload)
    memory = PeakMemory(spark)
    sql = rows_sql(schema, CORRECT)
    points = []
    for years in args.years:
        start = date(args.year, 1, 1)
        end = date(args.year + years, 1, 1)
        last = end - timedelta(days=1)
        put_back_defect(spark, schema, target, start, end)
        request = write_request(
            bench_dir / "requests", f"lineitem_net_{years}y", sql, ROWS_SUITE,
            target={"table": target, "partition_column": "l_shipdate", "grain": "day"},
            range={"start": start.isoformat(), "end": last.isoformat()},
            time_zone="UTC",
            keys=["l_orderkey", "l_linenumber"],
            reconciliation=rows_reconciliation(schema),
            **request_extras(args),
        )
        predicate = f"l_shipdate >= DATE'{start}' AND l_shipdate < DATE'{end}'"
        say(f"(e) row-level recompute of {years} year(s), {start} .. {last}, of {target}")
        memory.reset()
        detail = bracketed(spark, settings, request, sql, start, end, bare_table, target, predicate)
        detail.update(memory.read())
        rows = spark.table(target).where(predicate).count()
        detail.update({
            "years": years,
            "rows": rows,
            "range": [start.isoformat(), last.isoformat()],
            "full_s_per_million_rows": round(detail["full_s"] / rows * 1e6, 3),
            "bare_s_per_million_rows": round(detail["bare_mean_s"] / rows * 1e6, 3),
            "request": str(request),
        })
        drop_staging(spark, detail, args.keep_staging)
        points.append(detail)
    first = points[0]
    return {
        "row_level": first,
        "curve": points,
        "ratio_flat": all(p["ratio_full_over_bare"] <= first["ratio_full_over_bare"] for p in points[1:]),
        "pid": os.getpid(),
    }
