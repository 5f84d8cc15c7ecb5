"""Pinned staging: a run that goes straight through holds its staged rows in the session and writes them once."""

import json

from chispa import assert_df_equality

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from tests.conftest import quiet_runner
from tests.fixtures import D8, D9, D10, EVENTS_SCHEMA, TARGET_ROWS, events_request, make_events

SOURCE = [(3, D9, 30), (4, D9, 40), (5, D9, 50), (10, D9, 100), (6, D10, 600), (7, D10, 700), (8, D10, 800), (9, D10, 900)]


def test_a_pinned_recompute_publishes_the_validated_rows_in_one_commit_and_writes_no_staging_table(
        spark, settings, db, tmp_path):
    make_events(spark, db, SOURCE)
    before = current_version(spark, f"{db}.events")
    plan, state = prepare(spark, settings, events_request(tmp_path, db, start=D9, end=D10, reconcile=True,
                                                          staging="pinned", batch_size=1))
    assert plan.staging_mode == "pinned"
    result = quiet_runner(spark, settings).run(plan, state)

    assert (result.status, result.published_version) == ("published", before + 1)
    expected = [r for r in TARGET_ROWS if r[1] == D8] + [(i, d, v * 10) for i, d, v in SOURCE]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    assert not spark.catalog.tableExists(plan.staging_table)
    post = [(c.partition, c.name, c.success) for c in result.checks if c.kind == "post_publish"]
    assert post == [(None, "written_rows_and_checksum_equal_staging", True),
                    ("2024-03-09", "rows_equal_staging_and_files_replaced", True),
                    ("2024-03-10", "rows_equal_staging_and_files_replaced", True)]
    stored = json.loads(Ledger(spark, settings.ledger_schema).find_run(plan.run_id)["plan_json"])
    assert stored["staging_mode"] == "pinned"
    report = (settings.runs_dir / plan.run_id / "report.md").read_text()
    assert "staged rows pinned in the run's Spark session" in report


def test_a_pinned_patch_merges_the_corrected_rows(spark, settings, db, tmp_path):
    make_events(spark, db, [(4, D9, 44), (11, D9, 110)])
    sql = tmp_path / "fix.sql"
    sql.write_text(f"SELECT id, dt, v FROM {db}.events_src WHERE dt >= :range_start AND dt < :range_end")
    plan, state = prepare(spark, settings, events_request(tmp_path, db, strategy="patch", source={"sql": str(sql)},
                                                          staging="pinned"))
    result = quiet_runner(spark, settings).run(plan, state)

    assert result.status == "published"
    expected = [(i, d, 44 if i == 4 else v) for i, d, v in TARGET_ROWS] + [(11, D9, 110)]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    assert not spark.catalog.tableExists(plan.staging_table)
    assert [(c.name, c.success) for c in result.checks if c.kind == "post_publish"] == [("staged_rows_present", True)]


def test_until_validate_keeps_a_durable_staging_table_though_pinned_was_asked(spark, settings, db, tmp_path):
    make_events(spark, db, SOURCE)
    plan, state = prepare(spark, settings, events_request(tmp_path, db, staging="pinned"))
    result = quiet_runner(spark, settings).run(plan, state, until="validate")

    assert result.status == "validated"
    assert spark.catalog.tableExists(plan.staging_table)
    stored = json.loads(Ledger(spark, settings.ledger_schema).find_run(plan.run_id)["plan_json"])
    assert stored["staging_mode"] == "durable"
