"""The backfill job under ``spark-submit`` on a local cluster: separate executor JVMs, a metastore of its own.

``spark-submit --master local-cluster[2,1,1024] jobs/backfill_job.py run REQUEST`` must publish exactly the rows
the request derives (target and mart), on the executors, and ``rollback`` must restore both. The subprocess cannot open
this session's embedded Derby metastore, so it gets its own ``BACKFILL_HOME`` with its own warehouse and Derby
metastore, passed the way a cluster's configuration passes them (``--conf``); ``tests/cluster_setup.py``, run by
spark-submit with the same configuration on ``local[1]``, creates its tables, and this session reads the
published table by path.

Local-cluster mode works with pip-installed pyspark; three details (found while writing this test):

- The ``spark-submit`` next to ``sys.executable`` finds ``SPARK_HOME`` by running ``find_spark_home.py`` with
  ``PYSPARK_DRIVER_PYTHON``, else ``PYSPARK_PYTHON``, else the ``python3`` on PATH, which lacks pyspark when the
  virtual environment is not activated; so both are set to ``sys.executable`` (also the executors' Python).
- The workers start executor JVMs from ``$SPARK_HOME/jars`` and give each executor a work dir
  ``$SPARK_HOME/work/APP/N`` holding a copy of the Delta jars (``--jars``) and its logs (about 90 MB per executor),
  which for pip's pyspark is inside the virtual environment. So ``SPARK_HOME`` is a temporary folder whose
  ``bin`` and ``jars`` link to the pyspark package and whose ``conf`` holds the local default's log4j2
  configuration (warnings and errors only).
- ``PYTHONPATH``: the driver imports ``backfill_lib`` and ``tests`` from this checkout, not from whatever
  checkout the virtual environment has installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pyspark
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from backfill_lib.adapters.delta_jars import cached_jars
from backfill_lib.adapters.session import DELTA_CATALOG, DELTA_EXTENSION, LOG4J2_PROPERTIES, SHORT_LIVED_JVM_OPTIONS
from tests.conftest import ROOT
from tests.fixtures import D8, D9, D10, EVENTS_SCHEMA, with_mart

pytestmark = pytest.mark.cluster

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
MASTER = "local-cluster[2,1,1024]"  # 2 workers with 1 core and 1024 MB each: two executor JVMs
DELTA_PACKAGE = "io.delta:delta-spark_4.1_2.13:4.4.0"


def delta_jars() -> list[str]:
    """How spark-submit gets Delta: ``--jars`` of the files the test session's own start resolved into the Ivy
    cache (:mod:`backfill_lib.adapters.delta_jars`), else ``--packages``. The same jars either way; ``--packages``
    runs an Ivy resolution in every spark-submit (30-35 s of wall time each on 2 busy cores)."""
    jars = cached_jars({}, DELTA_PACKAGE)
    return ["--jars", ",".join(jars)] if jars else ["--packages", DELTA_PACKAGE]

#: What the request publishes: 2024-03-09 recomputed from the source (v * 10, id 10 new), the rest untouched
EXPECTED = [(1, D8, 1), (2, D8, 2), (3, D9, 300), (4, D9, 400), (5, D9, 500), (10, D9, 1000),
            (6, D10, 6), (7, D10, 7), (8, D10, 8), (9, D10, 9)]


@pytest.fixture(scope="module")
def spark_home(tmp_path_factory):
    """A SPARK_HOME of links to the pip-installed pyspark, so that executor work dirs stay out of the venv."""
    home = tmp_path_factory.mktemp("spark_home")
    package = Path(pyspark.__file__).parent
    for name in ("bin", "jars"):
        (home / name).symlink_to(package / name)
    (home / "conf").mkdir()
    (home / "conf" / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
    yield home
    shutil.rmtree(home / "work", ignore_errors=True)  # the executors' copies of the Delta jars, ~90 MB each


def spark_submit(spark_home: Path, home: Path, *args: str, master: str = MASTER) -> subprocess.CompletedProcess:
    """``spark-submit`` with Delta, the Hive catalog, a warehouse and a Derby metastore under ``home``.

    These are the settings a cluster supplies itself (spark-defaults, the platform's catalog); see
    ``conf/cluster/``. ``BACKFILL_SPARK_MASTER`` is set to a local master on purpose: the job must reuse the
    spark-submit session, never build the local default.
    """
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "BACKFILL_HOME": str(home),
        "BACKFILL_SPARK_MASTER": "local[2]",
    }
    events = home / "eventlog"
    events.mkdir(parents=True, exist_ok=True)
    confs = {
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(home / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={home / 'metastore_db'};create=true",
        # C1 only, in the driver and the executors: these JVMs run tiny jobs for seconds (see SHORT_LIVED_JVM_OPTIONS)
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={home} {SHORT_LIVED_JVM_OPTIONS}",
        "spark.executor.extraJavaOptions": SHORT_LIVED_JVM_OPTIONS,
        # small-data settings, as conf/settings.yml gives the local default
        "spark.sql.shuffle.partitions": "2",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",  # one plain JSON-lines file per application
        "spark.eventLog.dir": events.as_uri(),
    }
    command = [str(SPARK_SUBMIT), "--master", master, *delta_jars()]
    for key, value in confs.items():
        command += ["--conf", f"{key}={value}"]
    return subprocess.run([*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)


def _ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout[-8000:]}\nstderr:\n{proc.stderr[-5000:]}"
    return proc.stdout


def _event_log(home: Path) -> list[dict]:
    [log] = (home / "eventlog").glob("app-*")  # the local-cluster run (the setup's local[1] run is local-*)
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_backfill_job_help_and_exit_code_under_spark_submit(spark_home, tmp_path):
    """``--help`` and a bad request need no session; the job's exit code is spark-submit's exit code.

    spark-submit's PythonRunner merges the Python process's stderr into its stdout, so the job's one-line error
    is on spark-submit's stdout. ``--help`` runs as a plain Python script (the job file, its arguments and its
    imports under spark-submit are what the bad request checks; a second spark-submit JVM would add nothing).
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = _ok(subprocess.run([sys.executable, "jobs/backfill_job.py", "--help"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300))
    assert "Usage: backfill [OPTIONS] COMMAND" in out
    for command in ("plan", "run", "publish", "status", "report", "demo"):
        assert re.search(rf"│ {command} +\S", out), f"command {command} missing from --help:\n{out}"
    bad = spark_submit(spark_home, tmp_path, "jobs/backfill_job.py", "run", "conf/backfills/missing.yml",
                       master="local[1]")
    assert bad.returncode == 2
    assert "error: conf/backfills/missing.yml: request file not found" in bad.stdout


def test_spark_submit_on_local_cluster_publishes_the_expected_rows_and_rolls_back(spark, db, spark_home, tmp_path,
                                                                                 tmp_path_factory):
    request = with_mart(tmp_path, db, reconcile=True)
    home = tmp_path_factory.mktemp("cluster_home")

    _ok(spark_submit(spark_home, home, "tests/cluster_setup.py", db, master="local[1]"))
    out = _ok(spark_submit(spark_home, home, "jobs/backfill_job.py", "run", str(request)))
    run_id = re.search(r"run ID: (bf_\w+)", out).group(1)
    assert re.search(rf"run {run_id}: published 1 partitions \(4 rows\) into {db}.events as version 1 \(was 0\); "
                     r"(\d+) of \1 checks passed", out)
    assert f"mart {db}.events_monthly: 1 partitions published as version 1 (was 0)" in out

    # the spark-submit session was reused: the job ran on the local cluster's two executor JVMs
    events = _event_log(home)
    [env] = [e for e in events if e["Event"] == "SparkListenerEnvironmentUpdate"]
    assert env["Spark Properties"]["spark.master"] == MASTER
    added = {e["Executor ID"] for e in events if e["Event"] == "SparkListenerExecutorAdded"}
    assert {"0", "1"} <= added
    task_executors = {e["Task Info"]["Executor ID"] for e in events if e["Event"] == "SparkListenerTaskEnd"}
    assert task_executors and task_executors <= added

    # the published table, read by path from the job's warehouse, holds the expected rows
    path = home / "warehouse" / f"{db}.db" / "events"
    published = spark.read.format("delta").load(str(path))
    assert_df_equality(published, spark.createDataFrame(EXPECTED, EVENTS_SCHEMA), ignore_row_order=True,
                       ignore_nullable=True)

    # exactly one version published, carrying the run ID
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    assert [h["version"] for h in history] == [0, 1]
    meta = json.loads(history[1]["userMetadata"])
    assert (meta["run_id"], meta["owner"], meta["strategy"]) == (run_id, "ana@example.com", "recompute")

    # the job's ledger and report live under its own BACKFILL_HOME
    runs = spark.read.format("delta").load(str(home / "warehouse" / "backfill_ledger.db" / "runs"))
    latest = runs.where(F.col("run_id") == run_id).agg(F.max_by("status", "seq"), F.max_by("published_version", "seq"))
    assert tuple(latest.first()) == ("published", 1)
    assert (home / "runs" / run_id / "report.html").is_file()

    # the mart published under the same run ID: March 2024 recomputed from the published rows
    mart_path = home / "warehouse" / f"{db}.db" / "events_monthly"
    assert [tuple(r) for r in spark.read.format("delta").load(str(mart_path)).collect()] == [
        (date(2024, 3, 1), len(EXPECTED), sum(v for _, _, v in EXPECTED))]  # 10 rows, total 2233

    # the release rolls back as one unit under spark-submit (a local master: no executor is needed for it)
    _ok(spark_submit(spark_home, home, "jobs/backfill_job.py", "rollback", run_id, "--by", "ci", "--reason", "test",
                     master="local[1]"))
    for p in (path, mart_path):
        restored = spark.read.format("delta").load(str(p))
        assert_df_equality(restored, spark.read.format("delta").option("versionAsOf", 0).load(str(p)),
                           ignore_row_order=True)
