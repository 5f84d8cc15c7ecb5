"""Intake refusals of issue 43: the product's own tables as a target (item 3), table properties that forbid the
write (item 6), names in another case (item 9). Every refusal is exit 2 before anything is staged or written."""

from __future__ import annotations

import pytest

from backfill_lib.cli import main
from backfill_lib.run.ledger import Ledger
from tests.conftest import write_request
from tests.fixtures import FULL_SOURCE, events_request, make_events


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
        f"error: table {db}.events has table property delta.appendOnly = true: Delta refuses a commit that removes "
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
