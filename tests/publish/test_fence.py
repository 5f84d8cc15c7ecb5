"""The fence: a validated run publishes later only while its range is as the plan read it, and a refusal names
the commits made in between (a run that published in between by its run ID)."""

from datetime import date

import pytest

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from tests.fixtures import D9, events_request, make_events
from tests.strategies.test_strategies import ID_DT_AMT, request, table

SOURCE = [(3, D9, 30), (4, D9, 40), (5, D9, 50), (10, D9, 100)]  # 2024-03-09 of the source


def test_the_fence_names_the_run_that_published_in_between(spark, settings, db, tmp_path, capsys, runner):
    from backfill_lib.cli import main
    from backfill_lib.runner import prepare

    make_events(spark, db, SOURCE)
    first = tmp_path / "first"
    first.mkdir()
    waiting, _ = prepare(spark, settings, events_request(first, db))
    assert runner.run(waiting, until="validate").status == "validated"
    second = tmp_path / "second"
    second.mkdir()
    other, _ = prepare(spark, settings, events_request(second, db))
    runner.concurrent = True  # past the waiting run's lease (the next test's subject): the fence must catch it
    assert runner.run(other).status == "published"  # version 1, in the same partition

    assert main(["publish", waiting.run_id]) == 4
    err = capsys.readouterr().err
    assert (f"changed in range since the plan read version 0 (now version 1): partitions 2024-03-09; committed "
            f"since: publish version 1 by backfill run {other.run_id}; nothing published") in err


def test_review_then_publish_later_and_the_fence(spark, settings, db, tmp_path, capsys, make_runner):
    from backfill_lib.cli import main
    from backfill_lib.core.errors import FenceError

    D10 = date(2024, 3, 10)
    table(spark, f"{db}.t", ID_DT_AMT, [(1, D9, 1), (2, D9, 2), (3, D10, 3)])
    sql = f"SELECT id, dt, amt * 10 AS amt FROM {db}.t WHERE dt >= :range_start AND dt < :range_end"
    path = request(tmp_path, f"{db}.t", sql)
    assert main(["run", str(path), "--until", "validate"]) == 0
    run_id = capsys.readouterr().out.split("run ID: ")[1].split()[0]
    assert current_version(spark, f"{db}.t") == 0
    ledger = Ledger(spark, settings.ledger_schema)
    assert ledger.run(run_id)["status"] == "validated"
    assert (settings.runs_dir / run_id / "report.html").exists()

    # a commit outside the range does not block; the publish then replaces exactly 2024-03-09
    spark.createDataFrame([(4, D10, 4)], ID_DT_AMT).write.format("delta").mode("append").saveAsTable(f"{db}.t")
    assert main(["publish", run_id]) == 0
    assert sorted(spark.table(f"{db}.t").collect()) == [(1, D9, 10), (2, D9, 20), (3, D10, 3), (4, D10, 4)]
    assert ledger.run(run_id)["status"] == "published"
    assert main(["publish", run_id]) == 4  # only a validated run can be published

    # a commit inside the range after validation: the fence refuses and names the partition
    plan, state = prepare(spark, settings, path)
    make_runner().run(plan, state, until="validate")
    spark.createDataFrame([(5, D9, 5)], ID_DT_AMT).write.format("delta").mode("append").saveAsTable(f"{db}.t")
    before = current_version(spark, f"{db}.t")
    with pytest.raises(FenceError, match=r"changed in range since the plan read version 2 \(now version 3\): partitions 2024-03-09"):
        make_runner().publish_validated(plan.run_id)
    assert current_version(spark, f"{db}.t") == before


def test_a_compaction_between_validation_and_publish_passes_the_fence_and_a_row_change_still_trips_it(
        spark, settings, db, tmp_path, make_runner):
    from chispa import assert_df_equality

    from backfill_lib.core.errors import FenceError

    D10 = date(2024, 3, 10)
    table(spark, f"{db}.t", ID_DT_AMT, [(1, D9, 1), (3, D10, 3)])
    spark.createDataFrame([(2, D9, 2)], ID_DT_AMT).write.format("delta").mode("append").saveAsTable(f"{db}.t")
    sql = f"SELECT id, dt, amt * 10 AS amt FROM {db}.t WHERE dt >= :range_start AND dt < :range_end"
    path = request(tmp_path, f"{db}.t", sql)
    plan, state = prepare(spark, settings, path)
    assert (plan.target_version, plan.partitions[0].current.files) == (1, 2)
    assert make_runner().run(plan, state, until="validate").status == "validated"

    # OPTIMIZE rewrites 2024-03-09's two files into one (dataChange = false): the same rows, so the run publishes
    spark.sql(f"OPTIMIZE {db}.t WHERE dt = '2024-03-09'")
    files = spark.sql(f"DESCRIBE HISTORY {db}.t").where("version = 2").first()["operationMetrics"]
    assert (files["numRemovedFiles"], files["numAddedFiles"]) == ("2", "1")
    result = make_runner().publish_validated(plan.run_id)
    assert (result.status, result.published_version) == ("published", 3)
    expected = spark.createDataFrame([(1, D9, 10), (2, D9, 20), (3, D10, 3)], ID_DT_AMT)
    assert_df_equality(spark.table(f"{db}.t"), expected, ignore_row_order=True)

    # a row change in range beside a compaction still trips it, and the refusal tells the two apart
    plan, state = prepare(spark, settings, path)
    assert make_runner().run(plan, state, until="validate").status == "validated"
    spark.createDataFrame([(4, D9, 4)], ID_DT_AMT).write.format("delta").mode("append").saveAsTable(f"{db}.t")
    spark.sql(f"OPTIMIZE {db}.t WHERE dt = '2024-03-09'")
    with pytest.raises(FenceError) as err:
        make_runner().publish_validated(plan.run_id)
    assert str(err.value) == (
        f"table {db}.t changed in range since the plan read version 3 (now version 5): partitions 2024-03-09; "
        "committed since: 1 commit by other writers; 1 commit that changed no rows; nothing published")
    assert current_version(spark, f"{db}.t") == 5
