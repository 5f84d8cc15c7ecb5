"""Kill a real backfill process at each named crash point, resume it, and compare with a clean run.

Each crash runs in its own process (``tests/crash_job.py``) with its own folder, because the test session's
embedded Derby metastore admits one JVM. The published tables are read by path from the test session.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality

from backfill_lib.core.faults import CONFLICT_ENV, CRASH_ENV, SIGNAL_ENV
from tests.conftest import ROOT
from tests.fixtures import D8, D10, EVENTS_SCHEMA, FULL_EXPECTED, events_request

#: crash point -> the BACKFILL_CRASH_AT value (batch-level points die at batch 1, after batch 0 was staged)
POINTS = {"before_stage": "before_stage:1", "after_stage": "after_stage:1", "after_validate": "after_validate",
          "before_publish": "before_publish", "after_publish": "after_publish",
          # the same request with its rows pinned in the session (`staging: pinned`): nothing of it outlives the kill
          "pinned_after_stage": "after_stage:1", "pinned_after_publish": "after_publish"}


def _job(home: Path, schemas: list[str], commands: list[list[str]], crash: str | None = None):
    env = {k: v for k, v in os.environ.items() if k not in (CRASH_ENV, SIGNAL_ENV, CONFLICT_ENV)}
    env.update(BACKFILL_HOME=str(home), BACKFILL_SPARK_MASTER="local[2]")
    if crash:
        env[CRASH_ENV] = crash
    argv = [sys.executable, str(ROOT / "tests" / "crash_job.py"), ",".join(schemas)]
    for c in commands:
        argv += ["--", *c]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    _wait_for_jvm_exit(home)
    return done


def _wait_for_jvm_exit(home: Path, timeout: float = 60) -> None:
    """A killed driver's JVM exits when its stdin closes; wait for it, as it holds the Derby lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-f", f"derby.system.home={home.resolve()}"], capture_output=True).returncode:
            return
        time.sleep(0.5)
    raise AssertionError(f"a JVM still runs with home {home}")


#: the schema of the one source table every crash point's request reads (sources are only read)
SOURCE = "crash_source"


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """Crash one run at each point, then resume them all (and one twice) in one more process.

    Each point has its own target; they share one source table, which the first process creates with the targets
    (each table write on a cold JVM costs seconds)."""
    home = tmp_path_factory.mktemp("crash_home")
    requests = {}
    for point in POINTS:
        folder = tmp_path_factory.mktemp(point)
        pinned = {"staging": "pinned"} if point.startswith("pinned_") else {}
        requests[point] = events_request(folder, f"crash_{point}", start=D8, end=D10, source_db=SOURCE, batch_size=1,
                                         **pinned)
    schemas = [f"{SOURCE}+source"] + [f"crash_{p}+target" for p in POINTS]
    codes, killed = {}, {}
    for point, spec in POINTS.items():
        run = _job(home, schemas, [["run", str(requests[point]), "--run-id", f"run_{point}"]], crash=spec)
        codes[point] = run.returncode
        killed[point] = _commits(home / "warehouse" / f"crash_{point}.db" / "events")
    resumes = [["resume", f"run_{p}"] for p in POINTS] + [["resume", "run_after_publish"]]
    resumed = _job(home, schemas, resumes)
    return home, codes, resumed, killed


def _commits(table: Path) -> list[str]:
    """The commit files of the Delta table at ``table``, in order."""
    return sorted(p.name for p in (table / "_delta_log").glob("*.json"))


@pytest.mark.parametrize("point", list(POINTS))
def test_resume_after_a_kill_equals_a_clean_run(spark, crashed, point):
    home, codes, resumed, killed = crashed
    assert codes[point] == -9, f"the run was not killed at {point}"
    # killed before its publish, a run has written nothing to its target; after it, exactly the one commit
    assert len(killed[point]) == (2 if point.endswith("after_publish") else 1), killed[point]
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    path = home / "warehouse" / f"crash_{point}.db" / "events"
    published = spark.read.format("delta").load(str(path))
    assert_df_equality(published, spark.createDataFrame(FULL_EXPECTED, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    assert [h["version"] for h in history] == [0, 1]  # created, then exactly one publish
    assert f'"run_id": "run_{point}"' in history[1]["userMetadata"]
    staging = home / "warehouse" / "backfill_staging.db"
    staged = sorted(p.name for p in staging.glob(f"*run_{point}")) if staging.exists() else []
    assert staged == ([] if point.startswith("pinned_") else [f"crash_{point}__events__run_{point}"])
