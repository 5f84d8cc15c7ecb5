"""Source snapshot (issue 17, item 7): every Delta source is read at one pinned version per run; a source that
changes in range before publishing is reported, or refused with ``on_source_change: refuse``."""

import json

import pytest
from chispa import assert_df_equality

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.core.errors import SourceChangedError
from backfill_lib.core.table_names import check_table_name
from backfill_lib.plan.model import SourceVersion
from backfill_lib.plan.source_pins import pin_versions, table_key
from backfill_lib.run import batch_stager
from backfill_lib.ledger import Ledger
from backfill_lib.runner import prepare
from tests.fixtures import D8, D9, D10, D11, EVENTS_SCHEMA, FULL_SOURCE, events_request, make_events


def request_with_rules(tmp_path, db, **extra):
    """Recompute 2024-03-08..10 of db.events from db.events_src (v * 10), reconciled twice against the source:
    a row count (counted from the source's Delta log) and a sum (scanned)."""
    rules = [
        {"name": "rows_equal_source", "metric": "count(*)",
         "source": {"table": f"{db}.events_src", "partition_column": "dt", "metric": "count(*)"}},
        {"name": "v_equals_source", "metric": "sum(v)",
         "source": {"table": f"{db}.events_src", "partition_column": "dt", "metric": "sum(v * 10)"}},
    ]
    return events_request(tmp_path, db, start=D8, end=D10, reconciliation=rules, **extra)


def source_as_of_pin(spark):
    """The target after a recompute from FULL_SOURCE as pinned: v times 10, the later row absent."""
    return spark.createDataFrame([(i, d, v * 10) for i, d, v in FULL_SOURCE], EVENTS_SCHEMA)


def add_source_row(spark, db, row):
    spark.createDataFrame([row], EVENTS_SCHEMA).write.format("delta").mode("append").saveAsTable(f"{db}.events_src")


def test_pin_versions_rewrites_delta_tables_only(spark, db):
    make_events(spark, db, FULL_SOURCE)
    spark.createDataFrame([(1,)], "id INT").createOrReplaceTempView("snap_view")
    text = (f"WITH c AS (SELECT * FROM {db}.events_src e WHERE id IN (SELECT id FROM {db}.EVENTS)) "
            f"SELECT c.* FROM c JOIN snap_view USING (id) "
            f"UNION ALL SELECT * FROM {db}.events_src VERSION AS OF 0 TABLESAMPLE (100 PERCENT) t")
    add_source_row(spark, db, (10, D8, 1))  # events_src now at version 1, events at 0

    pinned, versions = pin_versions(spark, text)

    assert versions == {f"{db}.events_src": 1, f"{db}.events": 0}
    assert pinned == (f"WITH c AS (SELECT * FROM {db}.events_src VERSION AS OF 1 e WHERE id IN (SELECT id FROM "
                      f"{db}.EVENTS VERSION AS OF 0)) SELECT c.* FROM c JOIN snap_view USING (id) "
                      f"UNION ALL SELECT * FROM {db}.events_src VERSION AS OF 0 TABLESAMPLE (100 PERCENT) t")
    # With the plan's versions nothing is looked up: exactly those tables, at those versions.
    assert pin_versions(spark, text, {f"{db}.events_src": 0})[0].count("VERSION AS OF 0") == 2
    assert spark.sql(pinned).count() == 1 + 9  # id 1 of the pinned CTE, the 9 rows of version 0


def test_a_row_added_after_staging_is_not_published_and_the_change_is_reported(spark, settings, db, tmp_path,
                                                                               monkeypatch, runner):
    make_events(spark, db, FULL_SOURCE)
    plan, state = prepare(spark, settings, request_with_rules(tmp_path, db), run_id="snap_within_1")
    location = spark.sql(f"DESCRIBE DETAIL {db}.events_src").first()["location"]
    assert plan.source_versions == (SourceVersion(f"{db}.events_src", 0, location),)

    real = batch_stager.crash_point

    def add_row_after_staging(name, batch=None):
        if name == "after_stage":  # the only batch is staged: a writer adds a row in range
            add_source_row(spark, db, (10, D9, 1))
        real(name, batch)

    monkeypatch.setattr(batch_stager, "crash_point", add_row_after_staging)
    result = runner.run(plan, state)

    assert (result.status, result.published_version) == ("published", 1)
    assert current_version(spark, f"{db}.events_src") == 1
    assert_df_equality(spark.table(f"{db}.events"), source_as_of_pin(spark), ignore_row_order=True,
                       ignore_nullable=True)
    recon = {(c.name, c.partition): (c.success, c.observed, c.expected) for c in result.checks
             if c.kind == "reconciliation"}
    assert recon == {("rows_equal_source", "2024-03-08"): (True, "2", "2"),
                     ("rows_equal_source", "2024-03-09"): (True, "3", "3"),  # 4 rows in the source now
                     ("rows_equal_source", "2024-03-10"): (True, "4", "4"),
                     ("v_equals_source", "2024-03-08"): (True, "300", "300"),
                     ("v_equals_source", "2024-03-09"): (True, "1200", "1200"),  # 1210 now
                     ("v_equals_source", "2024-03-10"): (True, "3000", "3000")}
    [snap] = [c for c in result.checks if c.kind == "source_snapshot"]
    assert (snap.name, snap.success, snap.observed, snap.expected) == (f"{db}.events_src", False, "version 1",
                                                                       "version 0")
    assert snap.message == (f"source {db}.events_src changed after the run read it at version 0: now at version 1; "
                            "versions 1 changed its data in the run's range")
    ledger = Ledger(spark, settings.ledger_schema)
    stored = json.loads(ledger.run("snap_within_1")["plan_json"])["source_versions"]
    assert stored == [{"table": f"{db}.events_src", "version": 0, "location": location}]
    assert [c.success for c in ledger.recorded_checks("snap_within_1") if c.kind == "source_snapshot"] == [False]
    report = (settings.runs_dir / "snap_within_1" / "report.md").read_text()
    assert f"sources read at (Delta version, pinned for the whole run): {db}.events_src version 0" in report
    assert f"source_snapshot {db}.events_src failed on the range: source {db}.events_src changed" in report


def test_changes_outside_the_range_are_not_a_source_change(spark, settings, db, tmp_path, make_runner):
    make_events(spark, db, FULL_SOURCE)
    plan, state = prepare(spark, settings, request_with_rules(tmp_path, db), run_id="snap_outside_1")
    assert make_runner().run(plan, state, until="validate").status == "validated"
    add_source_row(spark, db, (10, D11, 1))  # the day after the range
    spark.sql(f"ALTER TABLE {db}.events_src SET TBLPROPERTIES ('x' = '1')")  # no data

    result = make_runner().publish_validated("snap_outside_1")

    assert result.status == "published"
    [snap] = [c for c in result.checks if c.kind == "source_snapshot"]
    assert (snap.success, snap.observed, snap.expected) == (True, "version 2", "version 0")
    assert snap.message == f"{db}.events_src has versions 1..2 after the pinned version 0, none changing the files the run read"


def test_refuse_exits_4_naming_the_source_and_publishes_nothing(spark, settings, db, tmp_path, make_runner):
    make_events(spark, db, FULL_SOURCE)
    request = request_with_rules(tmp_path, db, on_source_change="refuse")
    plan, state = prepare(spark, settings, request, run_id="snap_refuse_1")
    assert make_runner().run(plan, state, until="validate").status == "validated"
    spark.sql(f"DELETE FROM {db}.events_src WHERE id = 3")  # in range: 2024-03-09
    target_before = current_version(spark, f"{db}.events")

    with pytest.raises(SourceChangedError) as caught:
        make_runner().publish_validated("snap_refuse_1")

    assert caught.value.exit_code == 4
    assert str(caught.value) == (
        f"publish of {db}.events refused (on_source_change: refuse), nothing published: source {db}.events_src "
        "changed after the run read it at version 0: now at version 1; versions 1 changed its data in the run's range; "
        "start a new run to read the sources as they are now")
    assert current_version(spark, f"{db}.events") == target_before == 0
    assert Ledger(spark, settings.ledger_schema).run("snap_refuse_1")["status"] == "failed"


def test_a_resume_stages_from_the_pinned_version(spark, settings, db, tmp_path, monkeypatch, make_runner):
    make_events(spark, db, FULL_SOURCE)
    request = request_with_rules(tmp_path, db, batch_size=1, concurrency=1)
    plan, state = prepare(spark, settings, request, run_id="snap_resume_1")
    first = make_runner()
    real = batch_stager.crash_point

    def cancel_after_first_batch(name, batch=None):
        if name == "after_stage" and batch == 0:
            first.cancel()
        real(name, batch)

    monkeypatch.setattr(batch_stager, "crash_point", cancel_after_first_batch)
    with pytest.raises(Exception, match="cancelled"):
        first.run(plan, state)
    monkeypatch.setattr(batch_stager, "crash_point", real)
    add_source_row(spark, db, (10, D9, 1))  # in batches not yet staged
    add_source_row(spark, db, (11, D10, 1))

    resumed = make_runner().resume("snap_resume_1")

    assert resumed.plan.source_versions == plan.source_versions
    assert resumed.status == "published"
    assert_df_equality(spark.table(f"{db}.events"), source_as_of_pin(spark), ignore_row_order=True,
                       ignore_nullable=True)
    assert all(c.success for c in resumed.checks if c.kind == "reconciliation")
    [snap] = [c for c in resumed.checks if c.kind == "source_snapshot"]
    assert (snap.success, snap.observed, snap.expected) == (False, "version 2", "version 0")
    assert snap.message.endswith("versions 1, 2 changed its data in the run's range")


def test_a_validated_run_published_later_keeps_its_pinned_rows(spark, settings, db, tmp_path, make_runner):
    make_events(spark, db, FULL_SOURCE)
    plan, state = prepare(spark, settings, request_with_rules(tmp_path, db), run_id="snap_later_1")
    assert make_runner().run(plan, state, until="validate").status == "validated"
    add_source_row(spark, db, (10, D8, 5))

    result = make_runner().publish_validated("snap_later_1")

    assert (result.status, result.plan.source_versions) == ("published", plan.source_versions)
    assert_df_equality(spark.table(f"{db}.events"), source_as_of_pin(spark), ignore_row_order=True,
                       ignore_nullable=True)
    assert [c.success for c in result.checks if c.kind == "source_snapshot"] == [False]


def test_the_pin_key_of_parser_parts_is_the_canonical_name_lower_cased():
    # Spark's parser gives unquoted parts: the key spells them as a request's name is spelt
    assert table_key(["Sales", "Order-Lines"]) == "sales.`order-lines`" \
        == check_table_name("sales.`Order-Lines`").lower()
    assert table_key(["sales", "select"]) == "sales.`select`"
    assert table_key(["my-cat", "sales", "a.b"]) == "`my-cat`.sales.`a.b`"
    assert table_key(["delta", "/wh/T"]) == "delta.`/wh/T`"
