"""The Python API for notebooks and schedulers: plan_backfill (the dry run) and run_backfill, exported lazily."""

import io
import subprocess
import sys

from chispa import assert_df_equality
from rich.console import Console

import backfill_lib
from backfill_lib.adapters.delta_log import current_version
from tests.fixtures import D9, EVENTS_SCHEMA, events_request, make_events

SOURCE = [(3, D9, 30), (4, D9, 40), (5, D9, 50)]


def test_the_package_exports_its_api_without_importing_pyspark():
    code = ("import sys, backfill_lib; assert 'pyspark' not in sys.modules; "
            "print(sorted(n for n in backfill_lib.__all__ if n != '__version__'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['get_spark', 'load_request', 'load_settings', 'plan_backfill', 'run_backfill']"


def test_plan_backfill_writes_nothing_and_run_backfill_publishes_that_plan(spark, settings, db, tmp_path):
    make_events(spark, db, SOURCE)
    request = events_request(tmp_path, db)
    before = current_version(spark, f"{db}.events")

    plan = backfill_lib.plan_backfill(request, settings=settings, spark=spark)
    assert [p.key for p in plan.partitions] == ["2024-03-09"]
    assert (plan.target_table, plan.target_version) == (f"{db}.events", before)
    assert current_version(spark, f"{db}.events") == before  # the dry run wrote nothing

    result = backfill_lib.run_backfill(request, settings=settings, spark=spark, run_id="api_run_1")
    assert (result.status, result.plan.run_id, result.published_version) == ("published", "api_run_1", before + 1)
    assert_df_equality(spark.table(f"{db}.events").where("dt = DATE'2024-03-09'"),
                       spark.createDataFrame([(3, D9, 300), (4, D9, 400), (5, D9, 500)], EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    again = backfill_lib.run_backfill(request, settings=settings, spark=spark, run_id="api_run_1")
    assert (again.status, current_version(spark, f"{db}.events")) == ("published", before + 1)  # resumed: no write


def test_run_backfill_after_a_run_of_another_table_waits_for_it_and_says_so(spark, settings, db, tmp_path):
    # --after through the API passes the request's target to the wait, as the CLI does: a run of another table
    # (an upstream backfill) is waited for, with the note that it holds no range of this target
    make_events(spark, db, SOURCE)
    spark.sql(f"CREATE TABLE {db}.upstream USING delta PARTITIONED BY (dt) AS SELECT * FROM {db}.events")
    (tmp_path / "up").mkdir()
    upstream = events_request(tmp_path / "up", db,
                              target={"table": f"{db}.upstream", "partition_column": "dt", "grain": "day"})
    up_id, down_id = f"api_up_{db[2:]}", f"api_down_{db[2:]}"
    assert backfill_lib.run_backfill(upstream, settings=settings, spark=spark, run_id=up_id).status == "published"

    # the note is read from the console the run reports to (a terminal one prints each stage line), not from
    # logging, whose global state earlier tests in the worker may have changed
    console = Console(file=io.StringIO(), force_terminal=True, width=1000, color_system=None)
    result = backfill_lib.run_backfill(events_request(tmp_path, db), settings=settings, spark=spark,
                                       run_id=down_id, after=up_id, console=console)
    assert (result.status, result.plan.run_id) == ("published", down_id)
    assert f"[{up_id}] run {up_id} backfills {db}.upstream, not {db}.events: waiting orders this run after it (use " \
           f"it when this request reads {db}.upstream); it holds no range of {db}.events" in console.file.getvalue()


def test_a_signal_asks_the_run_to_stop_between_batches_a_second_stops_at_once_and_the_handlers_come_back(
        spark, settings):
    import os
    import signal

    import pytest

    from backfill_lib.api import Backfills

    backfills = Backfills(settings, spark)
    said: list[str] = []
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with backfills.cancel_on_signals("r1", said.append):
            os.kill(os.getpid(), signal.SIGTERM)
            assert backfills.cancelled.is_set()
            assert said == ["[r1] SIGTERM: finishing the batches in flight, then stopping (again to stop at once); "
                            "continue later with: backfill resume r1"]
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is before
    assert len(said) == 1
