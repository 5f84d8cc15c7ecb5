"""The pure modules import, build a plan and explain it with pyspark, py4j, delta and great_expectations blocked.

Each check runs in a fresh interpreter (this test session has pyspark imported already) whose ``sys.meta_path``
starts with a finder that raises ImportError for those four packages and records every attempt, so a module that
imports one of them (even inside ``try``) fails the check, naming the module that asked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import ROOT

BLOCKED = ("pyspark", "py4j", "delta", "great_expectations")

#: every module of backfill_lib.core, and the pure modules of intake, plan, validate and report
PURE_MODULES = tuple(sorted(f"backfill_lib.core.{p.stem}" for p in (ROOT / "backfill_lib" / "core").glob("*.py")
                            if p.stem != "__init__")) + (
    "backfill_lib.intake.request",
    "backfill_lib.intake.rules",
    "backfill_lib.intake.table_checks",
    "backfill_lib.intake.sql_text",
    "backfill_lib.intake.schema_guard",
    "backfill_lib.plan.model",
    "backfill_lib.plan.explain",
    "backfill_lib.plan.generated",
    "backfill_lib.validate.gates",
    "backfill_lib.report.render",
    "backfill_lib.report.documents",
)

#: installs the blocking finder, proves it blocks, and checks at exit that nothing asked for a blocked package
PRELUDE = f"""
import sys, traceback

BLOCKED = {BLOCKED!r}
ASKED = []


class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            caller = next((f.filename for f in reversed(traceback.extract_stack()[:-1])
                           if "/backfill_lib/" in f.filename), "?")
            ASKED.append(f"{{name}} (imported from {{caller}})")
            raise ImportError(f"{{name}} is blocked: a pure module must not import it")
        return None


for name in list(sys.modules):
    assert name.partition(".")[0] not in BLOCKED, f"{{name}} was imported before the finder was installed"
sys.meta_path.insert(0, Blocked())
for name in BLOCKED:
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        raise AssertionError(f"{{name}} was not blocked")
ASKED.clear()
"""

EPILOGUE = """
assert not ASKED, "blocked packages asked for: " + "; ".join(ASKED)
import backfill_lib
assert backfill_lib.__file__.startswith(ROOT), f"imported {backfill_lib.__file__}, not the checkout at {ROOT}"
"""

#: a hand-made table state of the demo target: 2013-01-01 and 2013-03-31 hold rows, 2013-04-01 is outside the range
PLAN = """
from datetime import datetime, timezone

from backfill_lib.core.table_state import Column, PartitionStats, TableState
from backfill_lib.intake.request import load_request
from backfill_lib.plan.builder import build_plan

state = TableState(
    name="demo.daily_route_delays", location="file:/tmp/x", version=7,
    columns=(Column("flight_date", "date"), Column("origin", "string"), Column("dest", "string"),
             Column("carrier", "string"), Column("flights", "bigint")),
    partition_columns=("flight_date",),
    partitions={"2013-01-01": PartitionStats(2, 1000, 265, "a"), "2013-03-31": PartitionStats(1, 500, 286, "b"),
                "2013-04-01": PartitionStats(9, 9000, 999, "c")},
)
request = load_request("conf/backfills/fix_daily_route_delays.yml")
plan = build_plan(request, state, request_path="r.yml", staging_schema="stg", batch_size=31,
                  now=datetime(2026, 11, 30, 2, 0, tzinfo=timezone.utc), run_id="bf_pure")
"""


def run_blocked(*code: str) -> str:
    """Run the ``code`` parts in a fresh interpreter with the blocked packages refused; return its stdout."""
    script = PRELUDE + f"ROOT = {str(ROOT)!r}\n" + "".join(textwrap.dedent(c) for c in code) + EPILOGUE
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def test_the_pure_modules_import_without_pyspark_delta_or_gx():
    out = run_blocked(f"""
        import importlib

        for name in {PURE_MODULES!r}:
            importlib.import_module(name)
        print(len({PURE_MODULES!r}), "imported")
    """)
    assert out.split() == [str(len(PURE_MODULES)), "imported"]
    assert "backfill_lib.core.partitions" in PURE_MODULES and "backfill_lib.core.table_state" in PURE_MODULES


def test_build_plan_from_a_hand_made_table_state_without_pyspark():
    out = run_blocked(PLAN, """
        print(len(plan.partitions), plan.partitions[0].key, plan.partitions[-1].key,
              [len(b.partitions) for b in plan.batches], plan.total.rows, plan.staging_table)
    """)
    assert out.strip() == "90 2013-01-01 2013-03-31 [31, 31, 28] 551 stg.demo__daily_route_delays__bf_pure"


def test_explain_a_plan_without_pyspark():
    out = run_blocked(PLAN, """
        from rich.console import Console

        from backfill_lib.plan.explain import explain

        console = Console(record=True, width=200)
        console.print(explain(plan))
        print(console.export_text())
    """)
    assert "90 x day on flight_date" in out
    assert "first 2013-01-01, last 2013-03-31" in out
    assert "3 files, 1.5 KiB, 551 rows" in out
