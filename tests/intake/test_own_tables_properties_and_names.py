"""Intake refusals of issue 43: the product's own tables as a target (item 3), table properties that forbid the
write (item 6), names in another case (item 9). Every refusal is exit 2 before anything is staged or written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backfill_lib.core.errors import one_line
from backfill_lib.cli import main
from backfill_lib.ledger import Ledger
from tests.conftest import write_request
from tests.fixtures import D9, EVENTS_SCHEMA, FULL_SOURCE, events_request, make_events


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: "), err
    return err


def _versions(spark, table: str) -> int:
    return spark.sql(f"DESCRIBE HISTORY {table}").count()


# ---------------------------------------------------------------- item 3: the product's own tables


@pytest.mark.parametrize("spelling", ["{ledger}.runs", "{LEDGER}.runs"])
def test_a_ledger_table_as_target_is_refused_naming_it(spark, settings, db, tmp_path, capsys, spelling):
    make_events(spark, db, FULL_SOURCE)
    ledger = Ledger(spark, settings.ledger_schema)
    ledger.ensure()
    table = spelling.format(ledger=settings.ledger_schema, LEDGER=settings.ledger_schema.upper())
    before = _versions(spark, f"{settings.ledger_schema}.runs")
    path = events_request(tmp_path, db, target={"table": table, "partition_column": "event_at", "grain": "day"})
    assert main(["run", str(path)]) == 2
    assert _error(capsys) == (
        f"error: {path}: field 'target.table': table {table} is in schema {settings.ledger_schema}, the settings' "
        "ledger_schema, which holds delta-backfill's run ledger; a backfill never writes the product's own tables")
    assert _versions(spark, f"{settings.ledger_schema}.runs") == before


def test_a_staging_table_or_mart_is_refused_naming_it(spark, settings, db, tmp_path, capsys):
    make_events(spark, db, FULL_SOURCE)
    staging = f"{settings.staging_schema}.{db}__events__bf_x"
    path = events_request(tmp_path, db, target={"table": staging, "partition_column": "dt", "grain": "day"})
    assert main(["plan", str(path)]) == 2
    assert _error(capsys) == (
        f"error: {path}: field 'target.table': table {staging} is in schema {settings.staging_schema}, the settings' "
        "staging_schema, which holds delta-backfill's staging tables; a backfill never writes the product's own "
        "tables")
    sql = tmp_path / "mart.sql"
    sql.write_text("SELECT 1 AS n")
    mart = {"table": f"{settings.ledger_schema}.checks", "partition_column": "event_at", "grain": "month",
            "sql": str(sql), "keys": ["n"]}
    path = events_request(tmp_path, db, marts=[mart])
    assert main(["plan", str(path)]) == 2
    assert _error(capsys).startswith(f"error: {path}: field 'marts.0.table': table {settings.ledger_schema}.checks "
                                     f"is in schema {settings.ledger_schema}, the settings' ledger_schema")


def test_a_ledger_table_named_by_its_path_is_refused(spark, settings, db, tmp_path, capsys):
    make_events(spark, db, FULL_SOURCE)
    Ledger(spark, settings.ledger_schema).ensure()
    location = spark.sql(f"DESCRIBE DETAIL {settings.ledger_schema}.runs").first()["location"]
    bare = location[len("file:"):] if location.startswith("file:") else location
    table = f"delta.`{bare}`"
    before = _versions(spark, f"{settings.ledger_schema}.runs")
    path = events_request(tmp_path, db, target={"table": table, "partition_column": "event_at", "grain": "day"})
    assert main(["run", str(path)]) == 2
    assert _error(capsys) == (
        f"error: {path}: field 'target.table': table {table} at {bare} is in the directory of schema "
        f"{settings.ledger_schema}, the settings' ledger_schema, which holds delta-backfill's run ledger; a backfill "
        "never writes the product's own tables")
    assert _versions(spark, f"{settings.ledger_schema}.runs") == before


# ---------------------------------------------------------------- item 6: properties that forbid the write


def test_an_append_only_target_is_refused_naming_the_property(spark, db, tmp_path, capsys):
    make_events(spark, db, FULL_SOURCE)
    spark.sql(f"ALTER TABLE {db}.events SET TBLPROPERTIES ('delta.appendOnly' = 'true')")
    before = _versions(spark, f"{db}.events")
    path = events_request(tmp_path, db)
    assert main(["run", str(path)]) == 2
    assert _error(capsys) == (
        f"error: {path}: table {db}.events has table property delta.appendOnly = true: Delta refuses a commit that removes "
        "or rewrites rows, as publishing a backfill does (a replaceWhere, MERGE or CREATE OR REPLACE); unset it "
        f"first (ALTER TABLE {db}.events UNSET TBLPROPERTIES ('delta.appendOnly')) or backfill another table")
    assert _versions(spark, f"{db}.events") == before


def test_an_append_only_mart_is_refused_before_the_target_publishes(spark, db, tmp_path, capsys):
    from tests.fixtures import make_monthly, with_mart

    make_events(spark, db, FULL_SOURCE)
    make_monthly(spark, db)
    spark.sql(f"ALTER TABLE {db}.events_monthly SET TBLPROPERTIES ('delta.appendOnly' = 'true')")
    before = _versions(spark, f"{db}.events")
    path = with_mart(tmp_path, db)
    assert main(["run", str(path)]) == 2
    assert _error(capsys) == (
        f"error: {path}: field 'marts.0.table': table {db}.events_monthly has table property delta.appendOnly = "
        "true: Delta refuses a commit that removes or rewrites rows, as publishing a backfill does (a replaceWhere, "
        f"MERGE or CREATE OR REPLACE); unset it first (ALTER TABLE {db}.events_monthly UNSET TBLPROPERTIES "
        "('delta.appendOnly')) or backfill another table")
    assert _versions(spark, f"{db}.events") == before


def _log_dir(spark, table: str) -> Path:
    """The ``_delta_log`` folder of local Delta table ``table``."""
    location = spark.sql(f"DESCRIBE DETAIL {table}").first()["location"]
    return Path(location[len("file:"):] if location.startswith("file:") else location) / "_delta_log"


def _commit_by_hand(spark, table: str, *actions: dict) -> Path:
    """Append a commit holding ``actions`` to ``table``'s Delta log, as a writer this session's Delta is not (a
    newer Delta Lake, another engine) would: the table's next version. Returns the log folder."""
    log = _log_dir(spark, table)
    version = max(int(p.name[:20]) for p in log.glob("*.json")) + 1
    (log / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return log


def _latest_metadata(spark, table: str) -> dict:
    """The ``metaData`` action that defines ``table`` at its latest version (read from its JSON commits)."""
    found = None
    for commit in sorted(_log_dir(spark, table).glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            found = action if "metaData" in action else found
    return found


def test_write_blockers_name_what_delta_would_refuse():
    from backfill_lib.core.table_state import uniform_blockers, unsupported_feature_blockers, write_blockers_of

    assert write_blockers_of({"delta.appendOnly": "false", "delta.enableChangeDataFeed": "true"}) == ()
    (blocker,) = write_blockers_of({"Delta.AppendOnly": " TRUE "})  # compared as Delta does, named as set
    assert blocker.what == "table property Delta.AppendOnly =  TRUE "
    # Delta compares feature names case-insensitively; only the unknown ones are named, sorted
    assert unsupported_feature_blockers(["appendOnly", "DeletionVectors"], ["appendonly", "deletionvectors"]) == ()
    (blocker,) = unsupported_feature_blockers(["zeta", "appendOnly", "alpha"], ["appendonly"], "Delta Lake 9.9")
    assert blocker.message("table db.t", "db.t") == (
        "table db.t has writer table features alpha, zeta: Delta Lake 9.9 does not support them, and Delta refuses "
        "any commit to a table that requires a writer feature it does not support (publishing a backfill is one "
        "commit); run the backfill with a Delta Lake release that supports them, or backfill another table")
    loaded = {"org.apache.spark.sql.delta.hudi.HudiConverter"}
    found = uniform_blockers({"delta.universalFormat.enabledFormats": "hudi, iceberg"}, loaded.__contains__)
    assert [b.what for b in found] == ["table property delta.universalFormat.enabledFormats = hudi, iceberg"]
    assert "lacks Delta's iceberg converter" in found[0].why
    assert uniform_blockers({"delta.universalFormat.enabledFormats": "iceberg"}, lambda cls: True) == ()


def test_a_writer_feature_this_delta_does_not_support_is_refused_naming_it(spark, db, tmp_path, capsys):
    """A table a newer Delta Lake wrote, requiring a writer feature this one does not know: Delta 4.4 reads it but
    refuses every commit (DELTA_UNSUPPORTED_FEATURES_FOR_WRITE), which used to surface at publish, after staging,
    as "unexpected Py4JJavaError"."""
    make_events(spark, db, FULL_SOURCE)
    _commit_by_hand(spark, f"{db}.events", {"protocol": {
        "minReaderVersion": 1, "minWriterVersion": 7,
        "writerFeatures": ["appendOnly", "invariants", "futureWriterFeature", "anotherFeature"]}})
    before = _versions(spark, f"{db}.events")
    path = events_request(tmp_path, db)
    for command in ("plan", "run"):
        assert main([command, str(path)]) == 2
        assert _error(capsys) == (
            f"error: {path}: table {db}.events has writer table features anotherFeature, futureWriterFeature: Delta Lake "
            "4.4.0 of this session does not support them, and Delta refuses any commit to a table that requires a "
            "writer feature it does not support (publishing a backfill is one commit); run the backfill with a "
            "Delta Lake release that supports them, or backfill another table")
    assert _versions(spark, f"{db}.events") == before
    assert spark.table(f"{db}.events").where("v >= 10").count() == 0  # nothing staged into it either


def test_a_mart_with_an_unsupported_writer_feature_is_refused_before_the_target_publishes(spark, db, tmp_path,
                                                                                          capsys):
    from tests.fixtures import make_monthly, with_mart

    make_events(spark, db, FULL_SOURCE)
    make_monthly(spark, db)
    _commit_by_hand(spark, f"{db}.events_monthly", {"protocol": {
        "minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["appendOnly", "invariants", "futureFeature"]}})
    before = _versions(spark, f"{db}.events")
    path = with_mart(tmp_path, db)
    assert main(["run", str(path)]) == 2
    assert _error(capsys) == (
        f"error: {path}: field 'marts.0.table': table {db}.events_monthly has writer table feature futureFeature: "
        "Delta Lake 4.4.0 of this session does not support it, and Delta refuses any commit to a table that "
        "requires a writer feature it does not support (publishing a backfill is one commit); run the backfill with "
        "a Delta Lake release that supports it, or backfill another table")
    assert _versions(spark, f"{db}.events") == before


def test_a_reader_feature_this_delta_does_not_support_is_refused_naming_it(spark, db, tmp_path, capsys):
    """Delta 4.4 cannot even read such a table: intake used to crash with "unexpected Py4JJavaError" (tableExists)."""
    make_events(spark, db, FULL_SOURCE)
    log = _commit_by_hand(spark, f"{db}.events", {"protocol": {
        "minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["futureReaderFeature"],
        "writerFeatures": ["appendOnly", "invariants", "futureReaderFeature"]}})
    commits = sorted(p.name for p in log.glob("*.json"))
    path = events_request(tmp_path, db)
    for command in ("plan", "run"):
        assert main([command, str(path)]) == 2
        assert _error(capsys) == (
            f"error: table {db}.events has reader table feature futureReaderFeature: Delta Lake 4.4.0 of this "
            "session does not support it, and Delta refuses to read or write a table that requires a reader feature "
            "it does not support; run the backfill with a Delta Lake release that supports it, or backfill another "
            "table")
    assert sorted(p.name for p in log.glob("*.json")) == commits  # no version written


def test_a_uniform_iceberg_table_without_the_converter_is_refused_naming_the_property(spark, db, tmp_path, capsys):
    """UniForm (``delta.universalFormat.enabledFormats = iceberg``) needs Delta's Iceberg converter on the
    classpath: without delta-iceberg, Delta 4.4 refuses every commit (DELTA_MISSING_ICEBERG_CLASS). The session
    cannot create such a table for the same reason, so the property is committed by hand, as a session with
    delta-iceberg would have set it."""
    spark.createDataFrame([(1, D9, 1), (2, D9, 2)], "id INT, dt DATE, v INT").createOrReplaceTempView("rows")
    spark.sql(f"CREATE TABLE {db}.events USING delta PARTITIONED BY (dt) TBLPROPERTIES ("
              "'delta.columnMapping.mode' = 'name', 'delta.enableIcebergCompatV2' = 'true') AS SELECT * FROM rows")
    spark.createDataFrame([(1, D9, 1), (2, D9, 2)], EVENTS_SCHEMA).write.format("delta").partitionBy("dt") \
        .saveAsTable(f"{db}.events_src")
    metadata = _latest_metadata(spark, f"{db}.events")
    metadata["metaData"]["configuration"]["delta.universalFormat.enabledFormats"] = "iceberg"
    _commit_by_hand(spark, f"{db}.events", metadata)
    before = _versions(spark, f"{db}.events")
    path = events_request(tmp_path, db)
    assert main(["run", str(path)]) == 2
    assert _error(capsys) == one_line(  # 500 characters at most: pytest's long temporary path cuts its end
        f"error: {path}: table {db}.events has table property delta.universalFormat.enabledFormats = iceberg: Delta refuses "
        "every commit to a UniForm iceberg table unless it can convert it, and this session's classpath lacks "
        "Delta's iceberg converter (org.apache.spark.sql.delta.icebergShaded.IcebergConverter, from the "
        "delta-iceberg package); run the backfill in a session with delta-iceberg installed, or backfill another "
        "table")
    assert _versions(spark, f"{db}.events") == before


def test_a_rebuild_of_a_row_tracking_table_leaves_delta_its_own_properties(spark, settings, db, tmp_path):
    """Row tracking keeps its hidden columns' names as table properties Delta refuses to be given
    (DELTA_UNKNOWN_CONFIGURATION): the rebuild, which copies the table's properties into its CREATE OR REPLACE,
    crashed at publish; Delta keeps them across the swap itself."""
    from chispa import assert_df_equality

    from backfill_lib.runner import prepare
    from tests.conftest import quiet_runner
    from tests.fixtures import FULL_EXPECTED

    make_events(spark, db, FULL_SOURCE)
    spark.sql(f"ALTER TABLE {db}.events SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')")
    owned = {k: v for k, v in spark.sql(f"DESCRIBE DETAIL {db}.events").first()["properties"].items()
             if k.startswith("delta.rowTracking.")}
    assert sorted(owned) == ["delta.rowTracking.materializedRowCommitVersionColumnName",
                             "delta.rowTracking.materializedRowIdColumnName"]
    (tmp_path / "all.sql").write_text(f"SELECT id, dt, v * 10 AS v FROM {db}.events_src")
    path = write_request(tmp_path / "rebuild.yml", owner="ana@example.com", reason="TEST-43: rebuild",
                         strategy="rebuild", target={"table": f"{db}.events", "partition_column": "dt", "grain": "day"},
                         time_zone="UTC", source={"sql": str(tmp_path / "all.sql")}, keys=["id"])
    plan, state = prepare(spark, settings, path)
    assert quiet_runner(spark, settings).run(plan, state).status == "published"
    assert_df_equality(spark.table(f"{db}.events"), spark.createDataFrame(FULL_EXPECTED, EVENTS_SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)
    properties = spark.sql(f"DESCRIBE DETAIL {db}.events").first()["properties"]
    assert properties["delta.enableRowTracking"] == "true"
    assert {k: v for k, v in properties.items() if k.startswith("delta.rowTracking.")} == owned


# ---------------------------------------------------------------- item 9: names in another case


def _upper_events(spark, db: str) -> None:
    """``db.events`` spelt ``ID, EVENT_DATE, V`` (partitioned by EVENT_DATE) and ``db.events_src`` spelt
    ``id, event_date, v``."""
    from tests.fixtures import D9, D10

    spark.createDataFrame([(1, D9, 1), (2, D9, 2), (3, D10, 3)], "ID INT, EVENT_DATE DATE, V INT") \
        .write.format("delta").partitionBy("EVENT_DATE").saveAsTable(f"{db}.events")
    spark.createDataFrame([(1, D9, 10), (2, D9, 20), (3, D10, 30)], "id INT, event_date DATE, v INT") \
        .write.format("delta").partitionBy("event_date").saveAsTable(f"{db}.events_src")


def _lower_request(tmp_path, db: str, table: str, rules: bool = True):
    sql = tmp_path / "events.sql"
    sql.write_text(f"SELECT id, event_date, v FROM {db}.events_src "
                   "WHERE event_date >= :range_start AND event_date < :range_end")
    fields = dict(
        owner="ana@example.com", reason="TEST-43: names in another case",
        target={"table": table, "partition_column": "event_date", "grain": "day"},
        range={"start": "2024-03-09", "end": "2024-03-09"}, time_zone="UTC", strategy="recompute",
        source={"sql": str(sql)}, keys=["id"], diff_gate={"allowed_changed_columns": ["v"]})
    if not rules:
        return write_request(tmp_path / "events.yml", **fields)
    return write_request(
        tmp_path / "events.yml", **fields,
        reconciliation=[{"name": "rows", "metric": "sum(v)",
                         "source": {"table": f"{db}.events_src", "partition_column": "EVENT_DATE",
                                    "metric": "sum(V)"}}],
        metric_rules=[{"name": "v_metrics", "source": {"table": f"{db}.events_src", "partition_column": "Event_Date"},
                       "metrics": {"sum": ["v"], "null_count": ["id"], "checksum": ["id", "v"]}}])


def test_names_in_another_case_resolve_as_the_session_does_and_print_as_the_table_spells_them(
        spark, settings, db, tmp_path, capsys):
    from chispa import assert_df_equality

    from backfill_lib.plan.prepare import prepare
    from tests.conftest import quiet_runner
    from tests.fixtures import D9, D10

    _upper_events(spark, db)
    path = _lower_request(tmp_path, db, f"{db.upper()}.EVENTS")
    plan, state = prepare(spark, settings, path)
    request = plan.request
    assert (request.target.table, request.target.partition_column, request.keys) == (f"{db}.events", "EVENT_DATE",
                                                                                     ("ID",))
    assert request.diff_gate.allowed_changed_columns == ("V",)
    assert [r.source.partition_column for r in request.reconciliation + request.metric_rules] == ["event_date"] * 2
    assert (request.metric_rules[0].metrics.sum, request.metric_rules[0].metrics.checksum) == (("V",), ("ID", "V"))
    assert [p.key for p in plan.partitions] == ["2024-03-09"]
    assert plan.target_version == 0

    result = quiet_runner(spark, settings).run(plan, state)
    assert result.status == "published", result.failures
    assert result.published_version == 1
    assert spark.table(f"{db}.events").columns == ["ID", "EVENT_DATE", "V"]  # no column added in another case
    expected = spark.createDataFrame([(1, D9, 10), (2, D9, 20), (3, D10, 3)], "ID INT, EVENT_DATE DATE, V INT")
    assert_df_equality(spark.table(f"{db}.events"), expected, ignore_row_order=True)
    assert all(c.success for c in result.checks)


def test_a_case_sensitive_session_refuses_a_name_in_another_case(spark, settings, db, tmp_path, capsys):
    _upper_events(spark, db)
    path = _lower_request(tmp_path, db, f"{db}.events", rules=False)
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        assert main(["plan", str(path)]) == 2
    finally:
        spark.conf.unset("spark.sql.caseSensitive")
    assert _error(capsys) == (f"error: {path}: table {db}.events has no column event_date (field "
                              "target.partition_column); its columns: ID, EVENT_DATE, V")
    assert _versions(spark, f"{db}.events") == 1


# ---------------------------------------------------------------- item 10: a month range ending on its last day


def test_a_month_range_written_with_its_last_day_backfills_that_month_whole(spark, settings, db, tmp_path):
    from datetime import date

    from chispa import assert_df_equality

    from backfill_lib.plan.prepare import prepare
    from tests.conftest import quiet_runner

    schema = "id INT, month DATE, v INT"
    jan, feb, mar = date(2024, 1, 1), date(2024, 2, 1), date(2024, 3, 1)
    spark.createDataFrame([(1, jan, 1), (2, feb, 2), (3, mar, 3)], schema).write.format("delta") \
        .partitionBy("month").saveAsTable(f"{db}.monthly")
    spark.createDataFrame([(1, jan, 10), (2, feb, 20), (4, feb, 40), (3, mar, 30)], schema).write.format("delta") \
        .partitionBy("month").saveAsTable(f"{db}.monthly_src")
    sql = tmp_path / "monthly.sql"
    sql.write_text(f"SELECT * FROM {db}.monthly_src WHERE month >= :range_start AND month < :range_end")
    path = write_request(
        tmp_path / "monthly.yml", owner="ana@example.com", reason="TEST-43: month range by its last day",
        target={"table": f"{db}.monthly", "partition_column": "month", "grain": "month"},
        range={"start": "2024-01-01", "end": "2024-02-29"}, time_zone="UTC", strategy="recompute",
        source={"sql": str(sql)}, keys=["id"], gates={"allow_row_growth": True})
    plan, state = prepare(spark, settings, path)
    assert [p.key for p in plan.partitions] == ["2024-01-01", "2024-02-01"]
    assert (plan.range_start, plan.range_end) == (jan, mar)

    result = quiet_runner(spark, settings).run(plan, state)
    assert result.status == "published", result.failures
    assert result.published_version == 1
    expected = spark.createDataFrame([(1, jan, 10), (2, feb, 20), (4, feb, 40), (3, mar, 3)], schema)
    assert_df_equality(spark.table(f"{db}.monthly"), expected, ignore_row_order=True)
