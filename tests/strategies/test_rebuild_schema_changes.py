"""Issue 43 item 2: every schema difference a rebuild would make is listed in the plan, the run's output and the
report; widened and added columns pass, a narrowed, retyped, dropped or renamed column needs
``schema_changes: allow`` in the request, else exit 2 before anything is written."""

import logging
from datetime import date

import pytest

from backfill_lib.adapters.delta_log import current_version
from backfill_lib.cli import main
from backfill_lib.core.errors import RequestError, SchemaMismatchError
from backfill_lib.core.table_state import Column
from backfill_lib.intake.request import load_request
from backfill_lib.intake.schema_guard import SchemaChange, changes_line, check_schema_changes, schema_changes
from backfill_lib.runner import prepare
from tests.conftest import quiet_runner, write_request

D8, D9 = date(2024, 3, 8), date(2024, 3, 9)
ORDERS = "id INT, dt DATE, amt INT, price DECIMAL(10,2), note STRING"


def test_every_kind_of_difference_is_listed_in_the_target_order_then_the_added_columns():
    # id is NOT NULL in both: the rebuilt table's columns are all nullable, so it changes too
    target = (Column("id", "int", False), Column("a", "smallint"), Column("amt", "decimal(10,2)"),
              Column("old", "string"), Column("gone", "int"), Column("n", "int"), Column("dt", "date"))
    source = (Column("id", "int", False), Column("a", "int"), Column("amt", "decimal(10,1)"), Column("new", "string"),
              Column("n", "string"), Column("dt", "date"), Column("extra", "bigint", False))
    changes = schema_changes(source, target)
    assert changes == (
        SchemaChange("nullability", "id", "NOT NULL", "NULL"), SchemaChange("widened", "a", "SMALLINT", "INT"),
        SchemaChange("narrowed", "amt", "DECIMAL(10,2)", "DECIMAL(10,1)"), SchemaChange("renamed", "old", "STRING", "new"),
        SchemaChange("dropped", "gone", "INT"), SchemaChange("retyped", "n", "INT", "STRING"),
        SchemaChange("added", "extra", None, "BIGINT"))
    assert changes_line(changes, allowed=False) == (
        "column id nullable (was NOT NULL); column a widened from SMALLINT to INT; column amt narrowed from DECIMAL(10,2) to "
        "DECIMAL(10,1) (refused without schema_changes: allow); column old renamed to new (STRING) (refused without "
        "schema_changes: allow); column gone dropped (INT) (refused without schema_changes: allow); column n retyped "
        "from INT to STRING (refused without schema_changes: allow); column extra added (BIGINT)")
    with pytest.raises(SchemaMismatchError) as err:
        check_schema_changes(changes, False, "r.yml", "db.t")
    assert str(err.value) == (
        "r.yml: a rebuild would change db.t's schema: column amt narrowed from DECIMAL(10,2) to DECIMAL(10,1); column old "
        "renamed to new (STRING); column gone dropped (INT); column n retyped from INT to STRING; set schema_changes: allow "
        "in the request to make these changes")
    check_schema_changes(changes, True, "r.yml", "db.t")  # allowed: no error
    check_schema_changes(changes[:2] + changes[-1:], False, "r.yml", "db.t")  # nullability, widened, added pass
    assert schema_changes(tuple(reversed(target[1:])), target[1:]) == ()  # the order of columns aside
    assert changes_line((), allowed=False) == "none: the rebuilt table keeps the target's columns and types"


def test_schema_changes_applies_to_a_rebuild_only(tmp_path):
    (tmp_path / "s.sql").write_text("SELECT 1")
    path = write_request(tmp_path / "r.yml", owner="ana@example.com", reason="TEST-43", strategy="recompute",
                         target={"table": "db.t", "partition_column": "dt", "grain": "day"},
                         range={"start": "2024-03-09", "end": "2024-03-09"}, source={"sql": str(tmp_path / "s.sql")},
                         keys=["id"], schema_changes="allow")
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert str(err.value) == (f"{path}: field 'schema_changes': applies to strategy rebuild only (got strategy "
                              "recompute, which keeps the target's schema)")


# --- Spark: real rebuilds of a tiny Delta table ----------------------------------------------------------------

def orders(spark, db):
    """``db.orders`` (ORDERS, by dt): two rows."""
    spark.createDataFrame([(1, D8, 10, 1.5, "a"), (2, D9, 20, 2.25, "b")],
                          "id INT, dt DATE, amt INT, price DOUBLE, note STRING") \
        .selectExpr("id", "dt", "amt", "CAST(price AS DECIMAL(10,2)) AS price", "note") \
        .write.format("delta").partitionBy("dt").saveAsTable(f"{db}.orders")


def rebuild(tmp_path, db, select, **extra):
    (tmp_path / "src.sql").write_text(f"SELECT {select} FROM {db}.orders")
    return write_request(tmp_path / "req.yml", owner="ana@example.com", reason="TEST-43: rebuild schema",
                         strategy="rebuild", target={"table": f"{db}.orders", "partition_column": "dt", "grain": "day"},
                         time_zone="UTC", source={"sql": str(tmp_path / "src.sql")}, keys=["id"], **extra)


def plan_text(out: str) -> str:
    """The dry run's text with its table cells' wrapping undone (runs of blanks and newlines as one blank)."""
    return " ".join(out.split())


def test_a_narrowed_rescaled_and_dropped_column_is_refused_then_allowed(spark, settings, db, tmp_path, capsys):
    orders(spark, db)
    select = "id, dt, CAST(amt AS SMALLINT) AS amt, CAST(price AS DECIMAL(10,1)) AS price"
    path = rebuild(tmp_path, db, select)
    listed = ("column amt narrowed from INT to SMALLINT{m}; column price narrowed from DECIMAL(10,2) to DECIMAL(10,1){m}; "
              "column note dropped (STRING){m}")
    assert main(["plan", str(path)]) == 0
    assert (f"schema changes {listed.format(m=' (refused without schema_changes: allow)')} publish statement"
            in plan_text(capsys.readouterr().out))

    assert main(["run", str(path)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {path}: a rebuild would change {db}.orders's schema: column amt narrowed from INT to SMALLINT; column "
        "price narrowed from DECIMAL(10,2) to DECIMAL(10,1); column note dropped (STRING); set schema_changes: allow in "
        "the request to make these changes")
    assert current_version(spark, f"{db}.orders") == 0

    allowed = rebuild(tmp_path, db, select, schema_changes="allow")
    plan, state = prepare(spark, settings, allowed)
    result = quiet_runner(spark, settings).run(plan, state)
    assert (result.status, current_version(spark, f"{db}.orders")) == ("published", 1)
    assert spark.table(f"{db}.orders").schema.simpleString() == (
        "struct<id:int,dt:date,amt:smallint,price:decimal(10,1)>")
    report = (settings.runs_dir / plan.run_id / "report.md").read_text()
    assert f"schema changes: {listed.format(m=' (allowed by the request)')}" in report


def test_widened_and_added_columns_pass_and_are_listed_in_the_plan_the_run_and_the_report(spark, settings, db,
                                                                                            tmp_path, capsys, caplog):
    orders(spark, db)
    path = rebuild(tmp_path, db, "id, dt, CAST(amt AS BIGINT) AS amt, price, note, CAST(NULL AS STRING) AS label")
    listed = "column amt widened from INT to BIGINT; column label added (STRING)"
    assert main(["plan", str(path)]) == 0
    assert f"schema changes {listed} publish statement" in plan_text(capsys.readouterr().out)
    with caplog.at_level(logging.INFO, logger="backfill.run"):  # the run's lines, logged when not on a terminal
        assert main(["run", str(path)]) == 0
    assert f"] schema changes: {listed}" in caplog.text  # plain or JSON log lines (CI=true logs JSON)
    assert current_version(spark, f"{db}.orders") == 1
    assert spark.table(f"{db}.orders").schema.simpleString() == (
        "struct<id:int,dt:date,amt:bigint,price:decimal(10,2),note:string,label:string>")
    newest = max(settings.runs_dir.glob("*/report.md"), key=lambda p: p.stat().st_mtime)  # this run's
    assert f"schema changes: {listed}" in newest.read_text()
