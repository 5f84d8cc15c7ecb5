"""Only queries run; intake checks every rule before staging; bad input is exit 2 with one line (issue 17, items 3,
5 and 8).

The pure tests (YAML, UTF-8, dates, message length) start no Spark; the others share the session's.
"""

from __future__ import annotations

import tracemalloc
import uuid
from datetime import date
from pathlib import Path

import pytest
import yaml

from backfill_lib.cli import main, one_line
from backfill_lib.core.errors import RequestError
from backfill_lib.core.safe_yaml import MAX_NODES
from backfill_lib.intake.request import load_request
from tests.conftest import ROOT, write_request

D9 = date(2024, 3, 9)


def _request_fields(tmp_path: Path, db: str = "s", sql: str | None = None, **extra) -> dict:
    sql_file = tmp_path / "events.sql"
    if not sql_file.exists() or sql is not None:
        sql_file.write_text(sql or f"SELECT id, dt, v * 10 AS v FROM {db}.events_src "
                                   "WHERE dt >= :range_start AND dt < :range_end")
    fields = {
        "owner": "ana@example.com", "reason": "TEST-17: trust", "target": {"table": f"{db}.events",
                                                                          "partition_column": "dt", "grain": "day"},
        "range": {"start": "2024-03-09", "end": "2024-03-09"}, "time_zone": "UTC", "strategy": "recompute",
        "source": {"sql": str(sql_file)}, "keys": ["id"],
    }
    fields.update(extra)
    return fields


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: "), err
    return err


# ---------------------------------------------------------------- pure: YAML, UTF-8, dates, message length


def _bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines)


def test_a_yaml_alias_bomb_as_strategy_is_refused_small_and_fast(tmp_path, capsys):
    text = "owner: a\nreason: b\n" + _bomb() + "\nstrategy: *a8\n"
    assert len(text) < 1100  # about 1 KB, expanding to 9**9 (387 million) strings
    path = tmp_path / "bomb.yml"
    path.write_text(text)
    tracemalloc.start()
    try:
        assert main(["plan", str(path)]) == 2
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak  # a few MiB at most (the unbounded loader grew past 4 GiB)
    err = _error(capsys)
    assert err.startswith(f"error: {path}: not valid YAML: the document expands through aliases to more than "
                          f"{MAX_NODES:,} nodes or 1,048,576 characters (")
    assert len(err) <= 500


def test_settings_use_the_bounded_loader(tmp_path, capsys):
    path = tmp_path / "settings.yml"
    path.write_text(_bomb() + "\nstaging_schema: *a8\n")
    assert main(["--settings", str(path), "status"]) == 2
    assert _error(capsys).startswith(f"error: {path}: not valid YAML: the document expands through aliases")
    path.write_bytes(b"time_zone: \xe9t\xe9\n")
    assert main(["--settings", str(path), "status"]) == 2
    assert _error(capsys) == f"error: {path}: not UTF-8 text (byte 0xe9 at offset 11)"


def test_a_request_that_is_not_utf8_names_the_file_and_byte(tmp_path, capsys):
    path = tmp_path / "latin1.yml"
    path.write_bytes(yaml.safe_dump(_request_fields(tmp_path)).encode("utf-8").replace(b"TEST-17", b"T\xc9ST-17"))
    assert main(["plan", str(path)]) == 2
    offset = path.read_bytes().index(b"\xc9")
    assert _error(capsys) == f"error: {path}: not UTF-8 text (byte 0xc9 at offset {offset})"


def test_a_source_sql_that_is_not_utf8_names_the_field(tmp_path):
    path = write_request(tmp_path / "r.yml", **_request_fields(tmp_path))
    sql = tmp_path / "events.sql"
    sql.write_bytes(b"SELECT 'caf\xe9' AS v")
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert str(err.value) == f"{path}: field 'source.sql': file {sql}: not UTF-8 text (byte 0xe9 at offset 11)"


@pytest.mark.parametrize("start, end, grain, zone", [
    ("9999-12-01", "9999-12-31", "day", "UTC"), ("9999-12-01", "9999-12-01", "month", "UTC"),
    ("9999-12-30", "9999-12-31", "hour", "UTC"), ("0001-01-01", "0001-01-01", "hour", "Asia/Kolkata"),
    ("0001-01-01", "0001-01-01", "day", "Asia/Kathmandu")])  # a day's midnight there is in year 0, in UTC
def test_a_range_at_the_ends_of_the_calendar_is_a_request_error(tmp_path, capsys, start, end, grain, zone):
    fields = _request_fields(tmp_path, range={"start": start, "end": end}, time_zone=zone)
    fields["target"]["grain"] = grain
    path = write_request(tmp_path / "r.yml", **fields)
    assert main(["plan", str(path)]) == 2
    assert _error(capsys) == (f"error: {path}: field 'range': {start} .. {end}: a partition bound (the exclusive end "
                              "included) would fall outside 0001-01-01 .. 9999-12-31")


def test_an_enum_error_echoes_a_bounded_input(tmp_path):
    path = write_request(tmp_path / "r.yml", **_request_fields(tmp_path, strategy="x" * 10_000))
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert str(err.value) == (f"{path}: field 'strategy': Input should be 'recompute', 'rebuild' or 'patch', got '"
                              + "x" * 57 + "...'")


@pytest.mark.parametrize("sql, holds", [
    ("ALTER TABLE s.events_src SET TBLPROPERTIES ('x'='1')", "holds a statement (ALTER TABLE), not a query"),
    ("DROP TABLE s.events_src;", "holds a statement (DROP TABLE), not a query"),
    ("INSERT INTO s.events_src VALUES (1, DATE'2024-03-09', 1)", "holds a statement (INSERT INTO), not a query"),
    ("BEGIN\n  INSERT INTO s.events_src VALUES (1, DATE'2024-03-09', 1);\n  SELECT 1;\nEND",
     "holds a SQL script (BEGIN ... END), not a query"),
    ("SELECT 1 AS id;\nDROP TABLE s.events_src", "holds 2 statements (SELECT, DROP), not one query"),
    ("SELECT 1 AS id) AS a; DROP TABLE s.events_src; SELECT * FROM (SELECT 1",
     "holds 3 statements (SELECT, DROP, SELECT), not one query"),
    ("-- nothing here\n/* at all */", "holds no query (empty, or only comments)"),
])
def test_a_source_file_holding_other_than_one_query_is_refused_before_spark(tmp_path, capsys, sql, holds):
    path = write_request(tmp_path / "r.yml", **_request_fields(tmp_path, sql=sql))
    assert main(["plan", str(path)]) == 2
    assert _error(capsys) == f"error: {path}: field 'source.sql': {tmp_path / 'events.sql'}: {holds}"


def test_one_line_cuts_to_500_characters():
    assert one_line("\n  first line  \nsecond") == "first line"
    cut = one_line("x" * 2000)
    assert len(cut) == 500 and cut.endswith("x...")


# ---------------------------------------------------------------- Spark: queries only, rules at intake


def _history(spark, table: str) -> int:
    return spark.sql(f"DESCRIBE HISTORY {table}").count()


def _staging_tables(spark, settings, db: str) -> list[str]:
    """The staging tables of runs on ``db``'s tables (``backfill_staging.<db>__<table>__<run_id>``)."""
    if not spark.catalog.databaseExists(settings.staging_schema):
        return []
    return [r["tableName"] for r in spark.sql(f"SHOW TABLES IN {settings.staging_schema}").collect()
            if r["tableName"].startswith(f"{db}__")]


def _events(spark, db: str) -> None:
    from tests.fixtures import FULL_SOURCE, make_events

    make_events(spark, db, FULL_SOURCE)


def test_plan_and_run_never_execute_a_statement_in_source_or_mart_sql(spark, settings, db, tmp_path, capsys):
    _events(spark, db)
    spark.sql(f"CREATE TABLE {db}.events_monthly USING delta PARTITIONED BY (month) AS "
              f"SELECT trunc(dt, 'MM') AS month, count(*) AS n FROM {db}.events GROUP BY 1")
    src, tgt, mart = f"{db}.events_src", f"{db}.events", f"{db}.events_monthly"
    versions = {t: _history(spark, t) for t in (src, tgt, mart)}
    sql_file = tmp_path / "events.sql"
    row = "(99, DATE'2024-03-09', 99)"
    cases = [
        # refused by the pure check (load_request, before Spark)
        (f"ALTER TABLE {src} SET TBLPROPERTIES ('x'='1')", "holds a statement (ALTER TABLE), not a query"),
        (f"DROP TABLE {src}", "holds a statement (DROP TABLE), not a query"),
        (f"INSERT INTO {src} VALUES {row}", "holds a statement (INSERT INTO), not a query"),
        (f"BEGIN INSERT INTO {src} VALUES {row}; SELECT * FROM {src}; END",
         "holds a SQL script (BEGIN ... END), not a query"),
        (f"SELECT * FROM {src}; DROP TABLE {src}", "holds 2 statements (SELECT, DROP), not one query"),
    ]
    for sql, holds in cases:
        sql_file.write_text(sql)
        path = write_request(tmp_path / "r.yml", **_request_fields(tmp_path, db))
        for command in ("plan", "run"):
            assert main([command, str(path)]) == 2, (command, sql)
            assert _error(capsys) == f"error: {path}: field 'source.sql': {sql_file}: {holds}"
    # refused by Spark's parser (the text starts like a query) or by the analysed plan
    spark_cases = [
        (f"WITH a AS (SELECT * FROM {src}) INSERT INTO {src} SELECT * FROM a",
         "holds a statement (InsertIntoStatement), not a query"),
        (f"SELECT id, dt, v FROM {src}) UNION ALL (SELECT 99, DATE'2024-03-09', 99",
         "does not parse as a query: [PARSE_SYNTAX_ERROR] Syntax error at or near ')'"),
        (f"SELECT id, dt, CAST(length(reflect('java.util.UUID', 'randomUUID')) AS INT) AS v FROM {src} "
         "WHERE dt >= :range_start AND dt < :range_end",
         "uses reflect / java_method / try_reflect (they call JVM methods); request SQL may only read tables"),
        (f"SELECT TRANSFORM(id, dt, v) USING 'cat' AS (id INT, dt DATE, v INT) FROM {src}",
         "uses TRANSFORM ... USING (it runs a program); request SQL may only read tables"),
    ]
    for sql, holds in spark_cases:
        sql_file.write_text(sql)
        path = write_request(tmp_path / "r.yml", **_request_fields(tmp_path, db))
        for command in ("plan", "run"):
            assert main([command, str(path)]) == 2, (command, sql)
            err = _error(capsys)
            assert err.startswith(f"error: {sql_file}: {holds}"), err
    # a mart's SQL is checked the same way, naming its field
    mart_sql = tmp_path / "monthly.sql"
    mart_sql.write_text(f"DROP TABLE {mart}")
    sql_file.write_text(f"SELECT id, dt, v * 10 AS v FROM {src} WHERE dt >= :range_start AND dt < :range_end")
    path = write_request(tmp_path / "r.yml", **_request_fields(tmp_path, db, marts=[
        {"table": mart, "partition_column": "month", "grain": "month", "sql": str(mart_sql), "keys": ["month"]}]))
    assert main(["run", str(path)]) == 2
    assert _error(capsys) == f"error: {path}: field 'marts.0.sql': {mart_sql}: holds a statement (DROP TABLE), not a query"
    # nothing ran: every table is still there, at its version, without the property
    assert {t: _history(spark, t) for t in (src, tgt, mart)} == versions
    assert "x" not in dict(spark.sql(f"SHOW TBLPROPERTIES {src}").collect())
    assert spark.table(src).count() == 9 and _staging_tables(spark, settings, db) == []


def test_a_query_with_comments_and_a_trailing_semicolon_runs(spark, settings, db, tmp_path, capsys):
    from backfill_lib.intake.sources import check_query

    assert check_query(spark, "-- lead\nSELECT 1 AS a; -- trail\n", "f.sql") == "-- lead\nSELECT 1 AS a"
    _events(spark, db)
    sql = (f"-- recompute v\nSELECT id, dt, v * 10 AS v /* ; */ FROM {db}.events_src\n"
           "WHERE dt >= :range_start AND dt < :range_end; -- the range is half-open\n")
    path = write_request(tmp_path / "r.yml", **_request_fields(tmp_path, db, sql=sql))
    assert main(["run", str(path)]) == 0
    assert sorted(spark.table(f"{db}.events").where("dt = DATE'2024-03-09'").collect()) == [
        (3, D9, 300), (4, D9, 400), (5, D9, 500)]  # FULL_SOURCE's v (30, 40, 50) times 10


def _rule(db: str, metric: str = "count(*)", source_metric: str = "count(*)", **source) -> dict:
    return {"name": "rows", "metric": metric,
            "source": {"table": f"{db}.events_src", "partition_column": "dt", "metric": source_metric, **source}}


def test_every_rule_is_checked_at_intake_naming_file_and_field(spark, settings, db, tmp_path, capsys):
    from backfill_lib.ledger import Ledger

    _events(spark, db)
    versions = {t: _history(spark, f"{db}.{t}") for t in ("events", "events_src")}
    ledger = Ledger(spark, settings.ledger_schema)
    ledger.ensure()
    runs_before = ledger.runs().count()
    cases = [
        ({"reconciliation": [_rule(db, "sum(flights")]}, "reconciliation.0.metric",
         "'sum(flights' is not a valid aggregate here: [PARSE_SYNTAX_ERROR] Syntax error at or near end of input"),
        ({"reconciliation": [_rule(db, "sum(nope)")]}, "reconciliation.0.metric",
         "'sum(nope)' is not a valid aggregate here: [UNRESOLVED_COLUMN.WITH_SUGGESTION]"),
        ({"reconciliation": [_rule(db, "id")]}, "reconciliation.0.metric",
         "'id' is not a valid aggregate here: [MISSING_AGGREGATION]"),
        ({"reconciliation": [_rule(db, table=f"{db}.nope")]}, "reconciliation.0.source.table",
         f"table {db}.nope cannot be read: [TABLE_OR_VIEW_NOT_FOUND]"),
        ({"reconciliation": [_rule(db, partition_column="day")]}, "reconciliation.0.source.partition_column",
         f"table {db}.events_src has no column day (columns: id, dt, v)"),
        ({"reconciliation": [_rule(db, source_metric="count(*) +")]}, "reconciliation.0.source.metric",
         "'count(*) +' is not a valid aggregate here: [PARSE_SYNTAX_ERROR]"),
        ({"reconciliation": [_rule(db, f"count(*)) FROM {db}.events; DROP TABLE {db}.events_src; SELECT (1")]},
         "reconciliation.0.metric", f"'count(*)) FROM {db}.events; DROP TABLE {db}.events_src; SELECT (1' is not a "
                                    "valid aggregate here: [PARSE_SYNTAX_ERROR]"),
        ({"reconciliation": [_rule(db, "max(length(java_method('java.util.UUID', 'randomUUID')))")]},
         "reconciliation.0.metric", "'max(length(java_method('java.util.UUID', 'randomUUID')))' is not a valid "
                                    "aggregate here: [AGGREGATE_FUNCTION_WITH_NONDETERMINISTIC_EXPRESSION]"),
        ({"reconciliation": [_rule(db, "reflect('java.lang.System', 'getenv', 'HOME')")]},
         "reconciliation.0.metric", "uses reflect / java_method / try_reflect (they call JVM methods)"),
        ({"metric_rules": [{"name": "p", "source": {"table": f"{db}.events_src", "partition_column": "dt"},
                            "metrics": {"sum": ["w"]}}]}, "metric_rules.0.metrics",
         f"table {db}.events_src: metric sum names column 'w', which does not exist"),
        ({"report_metric": "sum(v"}, "report_metric",
         "'sum(v' is not a valid aggregate here: [PARSE_SYNTAX_ERROR]"),
        ({"report_metric": "avg(nope)"}, "report_metric",
         "'avg(nope)' is not a valid aggregate here: [UNRESOLVED_COLUMN.WITH_SUGGESTION]"),
    ]
    for n, (extra, field, message) in enumerate(cases):
        path = write_request(tmp_path / "r.yml", **_request_fields(tmp_path, db, **extra))
        for command in ("plan", "run") if n in (0, 3, 10) else ("plan",):  # `run` shares prepare: three suffice
            assert main([command, str(path)]) == 2, (command, extra)
            err = _error(capsys)
            assert err.startswith(f"error: {path}: field '{field}': {message}"), err
            assert len(err) <= 500
    # refused before the run was recorded or anything staged: no run, no staging table, no version
    assert ledger.runs().count() == runs_before
    assert _staging_tables(spark, settings, db) == []
    assert {t: _history(spark, f"{db}.{t}") for t in ("events", "events_src")} == versions
    assert spark.catalog.tableExists(f"{db}.events_src")


def test_a_spark_error_during_a_run_ends_it_failed(spark, settings, db, tmp_path, capsys):
    from backfill_lib.ledger import Ledger

    _events(spark, db)
    sql = (f"SELECT id, dt, CASE WHEN v > 0 THEN CAST(raise_error('boom at ' || id) AS INT) END AS v "
           f"FROM {db}.events_src WHERE dt >= :range_start AND dt < :range_end")
    path = write_request(tmp_path / "r.yml", **_request_fields(tmp_path, db, sql=sql))
    run_id = f"boom_{uuid.uuid4().hex[:8]}"
    assert main(["run", str(path), "--run-id", run_id]) == 1
    err = _error(capsys)
    assert err.startswith("error: unexpected ") and "boom at " in err and len(err) <= 500
    record = Ledger(spark, settings.ledger_schema).run(run_id)
    assert record["status"] == "failed"
    assert record["message"].startswith("unexpected ") and "boom at " in record["message"]
    assert "\n" not in record["message"] and len(record["message"]) <= 500
    assert _history(spark, f"{db}.events") == 1


def test_a_view_target_and_reports_of_unknown_runs_are_exit_2(spark, settings, db, tmp_path, capsys):
    _events(spark, db)
    spark.sql(f"CREATE VIEW {db}.events_view AS SELECT * FROM {db}.events")
    fields = _request_fields(tmp_path, db)
    fields["target"]["table"] = f"{db}.events_view"
    path = write_request(tmp_path / "r.yml", **fields)
    assert main(["plan", str(path)]) == 2
    assert _error(capsys).startswith(f"error: table {db}.events_view is a view; a backfill writes Delta tables only "
                                     "([EXPECT_TABLE_NOT_VIEW")

    # before any run exists: a settings file with a ledger schema no run wrote
    fresh = f"ledger_{uuid.uuid4().hex[:8]}"
    conf = yaml.safe_load((ROOT / "conf" / "settings.yml").read_text())
    settings_file = tmp_path / "settings.yml"
    settings_file.write_text(yaml.safe_dump({**conf, "ledger_schema": fresh}))
    assert main(["--settings", str(settings_file), "report", "bf_none"]) == 2
    assert _error(capsys) == (f"error: run bf_none not found: ledger {fresh}.runs does not exist yet (no run was "
                              "recorded)")
    assert not spark.catalog.databaseExists(fresh)  # the report command created nothing

    from backfill_lib.ledger import Ledger

    Ledger(spark, settings.ledger_schema).ensure()
    assert main(["report", "bf_unknown_run"]) == 2
    assert _error(capsys) == f"error: run bf_unknown_run not found in ledger {settings.ledger_schema}.runs"


def test_an_error_line_is_cut_to_500_characters(spark, settings, db, tmp_path, capsys):
    _events(spark, db)
    metric = " + ".join(["sum(v)"] * 200) + " + sum(nope)"
    path = write_request(tmp_path / "r.yml", **_request_fields(tmp_path, db, report_metric=metric))
    assert main(["plan", str(path)]) == 2
    err = _error(capsys)
    assert len(err) == 500 and err.endswith("...") and err.startswith(f"error: {path}: field 'report_metric': ")
