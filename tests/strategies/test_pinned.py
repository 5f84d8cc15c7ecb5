"""Pinned staging: a run that goes straight through holds its staged rows in the session and writes them once."""

import json
from decimal import Decimal

import pytest
from chispa import assert_df_equality
from pyspark.sql.types import DateType, DecimalType, IntegerType, StructField, StructType
from rich.console import Console

from backfill_lib import api
from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import RequestError
from backfill_lib.ledger import Ledger
from backfill_lib.plan.explain import explain
from backfill_lib.report.text import print_status
from backfill_lib.run import staging
from backfill_lib.run.staging import Layout, pinned_layout
from backfill_lib.runner import prepare
from backfill_lib.strategies import recompute
from tests.conftest import INTERPRETED, quiet_runner
from tests.fixtures import D8, D9, D10, EVENTS_SCHEMA, TARGET_ROWS, events_request, make_events
from tests.strategies.test_strategies import request, table

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
    console = Console(record=True, width=400)
    print_status(console, plan.run_id, api.status(plan.run_id, settings=settings, spark=spark))
    shown = console.export_text()
    assert (f"published {before + 1}; staging pinned in the run's Spark session (no staging table; a stopped run "
            "resumes by recomputing)") in shown
    assert "\npartitions: 2 planned, all started (below)\n" in shown
    document = api.status_document(plan.run_id, settings=settings, spark=spark).run
    assert (document.staging, document.staging_table, document.staging_kept) == ("pinned", None, False)
    assert (document.planned_partitions, [p.partition for p in document.partitions]) == (2, ["2024-03-09", "2024-03-10"])
    summary = json.loads((settings.runs_dir / plan.run_id / "summary.json").read_text())
    assert (summary["staging"], summary["staging_table"]) == ("pinned", None)  # also what `run --json` prints


def test_by_default_a_run_of_one_batch_pins_and_a_run_of_several_batches_or_until_validate_stages_durably(
        spark, settings, db, tmp_path):
    make_events(spark, db, SOURCE)
    assert settings.staging == "auto"  # conf/settings.yml, as a new user has it

    def explained(plan) -> str:
        console = Console(record=True, width=400)
        console.print(explain(plan))
        return console.export_text()

    one, state = prepare(spark, settings, events_request(tmp_path, db, start=D9, end=D10))
    assert (len(one.batches), one.staging_mode, one.staging_reason) == (1, "pinned", "one batch, straight through")
    assert "staging                pinned in the run's Spark session (one batch, straight through): validated" in explained(one)
    assert f"with `--until validate` it stages durably in {one.staging_table.removesuffix(one.run_id)}<run ID>)" in explained(one)
    assert quiet_runner(spark, settings).run(one, state).status == "published"
    assert not spark.catalog.tableExists(one.staging_table)
    report = (settings.runs_dir / one.run_id / "report.md").read_text()
    assert "staged rows pinned in the run's Spark session (one batch, straight through; no staging table" in report

    several, state = prepare(spark, settings, events_request(tmp_path, db, start=D9, end=D10, batch_size=1))
    reason = "2 batches: a stopped run resumes from the batches it staged"
    assert (several.staging_mode, several.staging_reason) == ("durable", reason)
    shown = several.staging_table.removesuffix(several.run_id) + "<run ID>"  # `backfill run` stages under its own ID
    assert f"staging                durable ({reason}): staging table {shown} (kept" in explained(several)
    result = quiet_runner(spark, settings).run(several, state)
    assert result.status == "unchanged"  # the rows the first run published
    assert spark.catalog.tableExists(several.staging_table)
    stored = json.loads(Ledger(spark, settings.ledger_schema).find_run(several.run_id)["plan_json"])
    assert (stored["staging_mode"], stored["staging_reason"]) == ("durable", reason)
    document = api.status_document(several.run_id, settings=settings, spark=spark).run
    assert (document.staging, document.staging_table, document.staging_kept) == ("durable", several.staging_table, True)

    review, state = prepare(spark, settings, events_request(tmp_path, db, start=D9, end=D10, sql=(
        f"SELECT id, dt, v * 100 AS v FROM {db}.events_src WHERE dt >= :range_start AND dt < :range_end")))
    assert review.staging_mode == "pinned"  # the plan goes straight through; --until validate chooses again
    result = quiet_runner(spark, settings).run(review, state, until="validate")
    assert (result.status, result.plan.staging_mode) == ("validated", "durable")
    assert result.plan.staging_reason.startswith("the run stops for review (--until validate)")
    assert spark.table(review.staging_table).where("id = 9 AND v = 90000").count() == 1


@pytest.mark.parametrize("hint, layout", [
    ("REPARTITION_BY_RANGE(2, dt)", Layout(True, 2, 2, 8)),  # each day's rows in a Spark partition of their own
    ("REPARTITION(3)", Layout(False, 0, 2, 8)),  # round robin: each day's rows spread over three
])
def test_pinned_rows_that_lie_by_partition_are_published_as_they_lie_else_repartitioned_one_file_a_partition_either_way(
        spark, settings, db, tmp_path, monkeypatch, hint, layout):
    monkeypatch.setattr(staging, "SMALL_PIN_ROWS", 0)  # as many rows as a large run's: none gathered
    make_events(spark, db, SOURCE)
    seen = []
    monkeypatch.setattr(recompute, "pinned_layout", lambda name: seen.append(pinned_layout(name)) or seen[-1])
    sql = f"SELECT /*+ {hint} */ id, dt, v * 10 AS v FROM {db}.events_src WHERE dt >= :range_start AND dt < :range_end"
    plan, state = prepare(spark, settings, events_request(tmp_path, db, start=D9, end=D10, sql=sql, staging="pinned"))
    result = quiet_runner(spark, settings).run(plan, state)

    assert result.status == "published"
    assert seen == [layout]
    expected = [r for r in TARGET_ROWS if r[1] == D8] + [(i, d, v * 10) for i, d, v in SOURCE]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    added = spark.sql(f"DESCRIBE HISTORY {db}.events LIMIT 1").first()["operationMetrics"]["numFiles"]
    assert added == "2"


@pytest.mark.parametrize("small, layout", [
    (20_000, Layout(True, 1, 2, 8)),  # few rows: gathered into one Spark partition, written by its one task
    (7, Layout(False, 0, 2, 8)),  # more than "few": left spread, repartitioned
])
def test_few_pinned_rows_spread_over_spark_partitions_are_gathered_into_one_once_staged(
        spark, settings, db, tmp_path, monkeypatch, small, layout):
    monkeypatch.setattr(staging, "SMALL_PIN_ROWS", small)
    make_events(spark, db, SOURCE)
    seen = []
    monkeypatch.setattr(recompute, "pinned_layout", lambda name: seen.append(pinned_layout(name)) or seen[-1])
    sql = (f"SELECT /*+ REPARTITION(3) */ id, dt, v * 10 AS v FROM {db}.events_src "
           "WHERE dt >= :range_start AND dt < :range_end")
    plan, state = prepare(spark, settings, events_request(tmp_path, db, start=D9, end=D10, sql=sql, staging="pinned",
                                                          batch_size=1))
    result = quiet_runner(spark, settings).run(plan, state)

    assert result.status == "published"
    assert seen == [layout]  # two batches of one day, each spread over three Spark partitions
    expected = [r for r in TARGET_ROWS if r[1] == D8] + [(i, d, v * 10) for i, d, v in SOURCE]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    assert spark.sql(f"DESCRIBE HISTORY {db}.events LIMIT 1").first()["operationMetrics"]["numFiles"] == "2"
    assert [(c.partition, c.success) for c in result.checks if c.kind == "post_publish"][1:] == [
        ("2024-03-09", True), ("2024-03-10", True)]


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


def test_a_sessions_second_run_of_the_same_shape_compiles_next_to_no_new_classes(spark, settings, db, tmp_path):
    """One run compiles well over Spark's default of 100 generated classes; the session keeps 1,000, so a later
    run of the same request on other tables finds its classes cached instead of compiling them all again (with
    100 kept, the second of these runs compiles about 105). How many the first compiles depends on what earlier
    tests left in the cache. (The test session runs interpreted, see ``tests/conftest.py``; this test compiles as
    the product does.)"""
    compiles = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    other = f"{db}_again"
    spark.sql(f"CREATE SCHEMA {other}")
    for key in INTERPRETED:
        spark.conf.unset(key)
    try:
        counts = []
        for schema in (db, other):
            make_events(spark, schema, SOURCE)
            before = compiles.getCount()
            plan, state = prepare(spark, settings, events_request(tmp_path, schema, start=D9, end=D10,
                                                                  staging="pinned"))
            assert quiet_runner(spark, settings).run(plan, state).status == "published"
            counts.append(compiles.getCount() - before)
    finally:
        for key, value in INTERPRETED.items():
            spark.conf.set(key, value)
        spark.sql(f"DROP SCHEMA IF EXISTS {other} CASCADE")
    assert counts[1] <= 3, counts
    assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == "1000"


COUNTED = {"name": "rows_equal_source", "metric": "count(*)",
           "source": {"table": "{db}.events_src", "partition_column": "dt", "metric": "count(*)"}}
NOT_A_NUMBER = "sum(CAST(concat(id, 'x') AS INT))"


@pytest.mark.parametrize("side, staging, failing, named", [
    ("staged", "pinned", {**COUNTED, "name": "ids_as_numbers", "metric": NOT_A_NUMBER},
     "field 'reconciliation.1.metric': '{m}' of {db}.events failed on the staged rows"),
    ("source", "durable", {**COUNTED, "source": {**COUNTED["source"], "metric": NOT_A_NUMBER}},
     "field 'reconciliation.1.source.metric': '{m}' of {db}.events_src failed on the source rows"),
], ids=["staged", "source"])
def test_a_rule_whose_metric_fails_on_the_data_is_named_and_the_run_ends_with_nothing_published(
        spark, settings, db, tmp_path, side, staging, failing, named):
    # The metric analyses at intake (a cast of text to INT) and fails only on the data (ANSI: '3x' is no number).
    make_events(spark, db, SOURCE)
    before = current_version(spark, f"{db}.events")
    counted = json.loads(json.dumps(COUNTED).replace("{db}", db))
    failing = json.loads(json.dumps(failing).replace("{db}", db))
    path = events_request(tmp_path, db, start=D9, end=D10, staging=staging, reconciliation=[counted, failing])
    plan, state = prepare(spark, settings, path)
    with pytest.raises(RequestError) as err:
        quiet_runner(spark, settings).run(plan, state)

    assert err.value.exit_code == 2
    assert str(err.value).startswith(
        f"{path}: {named.format(m=NOT_A_NUMBER, db=db)}; nothing was published: [CAST_INVALID_INPUT]")
    assert current_version(spark, f"{db}.events") == before
    assert Ledger(spark, settings.ledger_schema).find_run(plan.run_id)["status"] == "failed"
    # The failure holds no lease: the corrected request runs at once and publishes.
    plan, state = prepare(spark, settings, events_request(tmp_path, db, start=D9, end=D10, staging=staging,
                                                          reconciliation=[counted]))
    result = quiet_runner(spark, settings).run(plan, state)
    assert (result.status, result.published_version) == ("published", before + 1)
    expected = [r for r in TARGET_ROWS if r[1] == D8] + [(i, d, v * 10) for i, d, v in SOURCE]
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(expected, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)


def test_a_metric_rule_whose_sum_overflows_on_the_source_rows_is_named(spark, settings, db, tmp_path):
    schema = StructType([StructField("id", IntegerType()), StructField("dt", DateType()),
                         StructField("amount", DecimalType(38, 0))])
    big = Decimal(9 * 10**37)
    table(spark, f"{db}.t", schema, [(1, D9, Decimal(5)), (2, D10, Decimal(6))])
    table(spark, f"{db}.s", schema, [(1, D9, big), (2, D9, big), (3, D10, Decimal(1))])
    path = request(tmp_path, f"{db}.t", f"SELECT id, dt, CAST(1 AS DECIMAL(38,0)) AS amount FROM {db}.s "
                   "WHERE dt >= :range_start AND dt < :range_end", start=D9, end=D10, staging="pinned",
                   metric_rules=[{"name": "amounts", "source": {"table": f"{db}.s", "partition_column": "dt"},
                                  "metrics": {"row_count": True, "sum": ["amount"]}}])
    plan, state = prepare(spark, settings, path)
    with pytest.raises(RequestError) as err:
        quiet_runner(spark, settings).run(plan, state)

    assert err.value.exit_code == 2
    assert str(err.value).startswith(f"{path}: field 'metric_rules.0' (amounts) of {db}.s failed on the source rows; "
                                     "nothing was published: [ARITHMETIC_OVERFLOW]")
    assert current_version(spark, f"{db}.t") == 0
    assert Ledger(spark, settings.ledger_schema).find_run(plan.run_id)["status"] == "failed"
