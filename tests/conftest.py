"""One SparkSession for the whole test run, built through the product's own embedded default, and the Runner
fixtures on it.

Every folder of tests/ shares this session: no other conftest creates one."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import uuid
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

# The README's `python -m pytest` runs on two pytest-xdist workers (`-n 2 --dist load` in pyproject.toml):
# each worker is its own process with its own SparkSession, BACKFILL_HOME (warehouse, Derby metastore) and
# tmp_path. Tests go out one at a time to whichever worker is free, in the order below, except the files in
# GROUPED, whose module-scoped fixtures (a story of crashed processes, a SPARK_HOME) must run once: each goes
# whole to one worker.

#: files kept whole on one worker (their module-scoped fixtures start JVMs of their own)
GROUPED = ("tests/e2e/test_crash_points.py", "tests/e2e/test_cluster.py", "tests/e2e/test_crash_safety.py",
           "tests/e2e/test_shared_metastore.py")
#: the longest units first, so that no long one is left to run alone at the end: the files that start JVMs of their
#: own, then the demo, then the wheel
LONGEST_FIRST = (*GROUPED, "tests/e2e/test_demo.py", "tests/e2e/test_wheel.py")
#: Spark SQL confs of the test JVMs: evaluate expressions interpreted, without generating and compiling Java code.
#: The tests' tables hold a few rows, and compiling each query's code on a JVM that runs hundreds of distinct
#: queries cost more than it saved (the measurements are in the commit that made it so).
#: Results do not depend on it, with one known Spark defect: ``spark.catalog.listTables`` cannot decode its rows
#: interpreted (the product does not call it). Code generation stays on in every process the tests start through
#: the CLI, spark-submit or the wheel, and in the product.
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
#: whether any collected test uses the ``spark`` fixture
_NEEDS_SPARK = pytest.StashKey[bool]()


def pytest_xdist_make_scheduler(config, log):
    """``--dist load``, except that each file of GROUPED is one unit of work.

    xdist's own ``--dist loadgroup`` cannot do it under pytest 9.2: it renames ``item._nodeid``, which pytest
    9.2's ``Node.nodeid`` no longer reads, so the groups silently fall apart. The scheduler sees node IDs only.
    """
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LoadWithGroupedFiles(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if path in GROUPED else nodeid

    return LoadWithGroupedFiles(config, log)


def pytest_collection_modifyitems(config, items):
    """Under xdist: put the longest units first (LONGEST_FIRST), the rest in collection order.

    Every worker computes the same order, as xdist requires; ``--no-loadscope-reorder`` makes the scheduler keep it.
    """
    if not _distributed(config):
        return
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
    config.stash[_NEEDS_SPARK] = any("spark" in item.fixturenames for item in items)


def _distributed(config) -> bool:
    """True in the controller and in the workers of an xdist run with workers (not under ``-n 0``)."""
    return bool(getattr(config.option, "numprocesses", None)) or hasattr(config, "workerinput")


@contextlib.contextmanager
def _one_spark_start_at_a_time(tmp_path_factory):
    """Hold a lock shared by the xdist workers of this run while a JVM starts.

    A local session resolves Delta's jars (``spark.jars.packages``) through Ivy into ``~/.ivy2.5.2``; two JVMs
    downloading into a cold cache at once can each read the other's half-written files. The lock file is in
    the run's base temporary folder, which the workers share (each worker's own is a folder inside it).
    """
    lock_path = tmp_path_factory.getbasetemp().parent / "spark_start.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session", autouse=True)
def _worker_session_first(request):
    """On an xdist worker of a run that uses Spark, start this worker's session before its first test.

    Its start is then the worker's first JVM start, under the lock, so the tests that launch JVMs of their own
    (spark-submit, crashed drivers) find the Ivy cache filled. A run without Spark tests (``tests/core``)
    starts none.
    """
    if hasattr(request.config, "workerinput") and request.config.stash.get(_NEEDS_SPARK, False):
        request.getfixturevalue("spark")


@pytest.fixture(scope="session")
def settings(tmp_path_factory):
    os.environ["BACKFILL_HOME"] = str(tmp_path_factory.mktemp("backfill_home"))
    os.environ["BACKFILL_SPARK_MASTER"] = "local[2]"
    os.chdir(ROOT)
    from backfill_lib.core.settings import load_settings

    # The workers' JVMs keep tiered compilation (C2): C1 only took a fifth off two 5-minute subsets, but the whole
    # suite ran 2,682 s with it against 2,604 s without (CI of 9555058 against 8bc336b): over 40 minutes the
    # slower C1 code costs what the compiler threads saved.
    return load_settings(ROOT / "conf" / "settings.yml")


@pytest.fixture(scope="session")
def spark(settings, tmp_path_factory):
    from backfill_lib.adapters.session import get_spark
    from backfill_lib.adapters.session import quiet_spark_query_errors

    with _one_spark_start_at_a_time(tmp_path_factory):
        session = get_spark(settings)
    session.conf.set("spark.sql.shuffle.partitions", "2")
    for key, value in INTERPRETED.items():
        session.conf.set(key, value)
    quiet_spark_query_errors()
    yield session
    session.stop()


@pytest.fixture
def db(spark):
    """A fresh schema for one test."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE SCHEMA {name}")
    yield name
    spark.sql(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def write_request(path: Path, **fields) -> Path:
    """Write a request YAML with ``fields`` (nested dicts allowed) and return its path."""
    path.write_text(yaml.safe_dump(fields, sort_keys=False, default_flow_style=False))
    return path


def quiet_runner(spark, settings, **changes):
    """A new :class:`backfill_lib.runner.Runner` on ``spark`` and ``settings`` (with ``changes`` applied, e.g.
    ``protected_tables=(...)``) whose console prints nowhere."""
    from rich.console import Console

    from backfill_lib.runner import Runner

    if changes:
        settings = settings.model_copy(update=changes)
    return Runner(spark, settings, Console(file=open(os.devnull, "w")))


@pytest.fixture
def make_runner(spark, settings):
    """``make_runner(**changes)``: a new quiet Runner per call (as a new process would have one), on the session's
    ``settings`` with ``changes`` applied."""
    return functools.partial(quiet_runner, spark, settings)


@pytest.fixture
def runner(make_runner):
    """A quiet Runner on the session's ``spark`` and ``settings``."""
    return make_runner()
