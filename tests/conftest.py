"""One SparkSession for the whole test run, built through the product's own embedded default, and the Runner
fixtures on it.

Every folder of tests/ shares this session: no other conftest creates one."""

from __future__ import annotations

import functools
import os
import uuid
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def settings(tmp_path_factory):
    os.environ["BACKFILL_HOME"] = str(tmp_path_factory.mktemp("backfill_home"))
    os.environ["BACKFILL_SPARK_MASTER"] = "local[2]"
    os.chdir(ROOT)
    from backfill_lib.core.settings import load_settings

    return load_settings(ROOT / "conf" / "settings.yml")


@pytest.fixture(scope="session")
def spark(settings):
    from backfill_lib.adapters.session import get_spark
    from backfill_lib.cli import quiet_spark_query_errors

    session = get_spark(settings)
    session.conf.set("spark.sql.shuffle.partitions", "2")
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
