"""Requests: loaded frozen from YAML, every mistake named by file and field, marts in dependency order (no Spark)."""

from datetime import date
from pathlib import Path

import pydantic
import pytest

from backfill_lib.core.errors import RequestError
from backfill_lib.intake.request import BackfillRequest, DateRange, Mart, Source, Target, load_request, mart_order
from tests.conftest import write_request

DEMO = "conf/backfills/fix_daily_route_delays.yml"


def valid(tmp_path, **changes):
    sql = tmp_path / "source.sql"
    sql.write_text("SELECT 1")
    fields = {
        "owner": "ana@example.com",
        "reason": "TICKET-1: fix",
        "target": {"table": "db.events", "partition_column": "dt", "grain": "day"},
        "range": {"start": "2024-03-08", "end": "2024-03-10"},
        "time_zone": "UTC",
        "strategy": "recompute",
        "source": {"sql": str(sql)},
        "keys": ["id"],
    }
    fields.update(changes)
    return {k: v for k, v in fields.items() if v is not None}


def test_demo_request_loads_frozen():
    request = load_request(DEMO)
    assert request.name == "fix_daily_route_delays"
    assert request.target.table == "demo.daily_route_delays"
    assert request.bounds() == (date(2013, 1, 1), date(2013, 4, 1))
    assert [r.name for r in request.reconciliation][0] == "flights_equal_source_count"
    with pytest.raises(pydantic.ValidationError):
        request.owner = "someone else"


def test_missing_owner_names_file_and_field(tmp_path):
    path = write_request(tmp_path / "r.yml", **valid(tmp_path, owner=None))
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert str(err.value) == f"{path}: field 'owner': Field required"


def test_unknown_strategy_names_field_and_value(tmp_path):
    path = write_request(tmp_path / "r.yml", **valid(tmp_path, strategy="overwrite_everything"))
    with pytest.raises(RequestError, match=r"field 'strategy': .*got 'overwrite_everything'"):
        load_request(path)


def test_reversed_range_names_field_and_dates(tmp_path):
    path = write_request(tmp_path / "r.yml", **valid(tmp_path, range={"start": "2024-03-10", "end": "2024-03-08"}))
    with pytest.raises(RequestError, match=r"field 'range': end 2024-03-08 is before start 2024-03-10"):
        load_request(path)


def test_month_grain_range_must_start_months(tmp_path):
    fields = valid(tmp_path, target={"table": "db.m", "partition_column": "m", "grain": "month"})
    path = write_request(tmp_path / "r.yml", **fields)
    with pytest.raises(RequestError, match=r"field 'range': range start 2024-03-08 is not the first day of a month"):
        load_request(path)


def test_missing_source_file_names_field_and_path(tmp_path):
    path = write_request(tmp_path / "r.yml", **valid(tmp_path, source={"sql": str(tmp_path / "nope.sql")}))
    with pytest.raises(RequestError, match=r"field 'source.sql': file .*nope.sql not found"):
        load_request(path)


def test_unknown_field_is_refused(tmp_path):
    path = write_request(tmp_path / "r.yml", **valid(tmp_path, onwer="typo@example.com"))
    with pytest.raises(RequestError, match=r"field 'onwer': Extra inputs are not permitted"):
        load_request(path)


def test_bad_table_name_and_unknown_zone(tmp_path):
    path = write_request(tmp_path / "r.yml", **valid(tmp_path, time_zone="Mars/Olympus"))
    with pytest.raises(RequestError, match=r"field 'time_zone': unknown time zone 'Mars/Olympus'"):
        load_request(path)
    bad_table = valid(tmp_path, target={"table": "db.events; DROP", "partition_column": "dt"})
    path = write_request(tmp_path / "r2.yml", **bad_table)
    with pytest.raises(RequestError, match=r"field 'target.table': 'db.events; DROP' is not a table name"):
        load_request(path)


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(RequestError, match=r"nope.yml: request file not found"):
        load_request(tmp_path / "nope.yml")
    (tmp_path / "list.yml").write_text("- a\n- b\n")
    with pytest.raises(RequestError, match=r"list.yml: expected a mapping of request fields, got list"):
        load_request(tmp_path / "list.yml")


def test_a_misspelt_key_is_named_first(tmp_path):
    target = {"table": "db.events", "partiton_column": "dt", "grain": "day"}
    path = write_request(tmp_path / "r.yml", **valid(tmp_path, target=target))
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert str(err.value) == (f"{path}: field 'target.partiton_column': Extra inputs are not permitted; "
                              "field 'target.partition_column': Field required")


@pytest.mark.parametrize("name, strategy", [("patch_jfk_route_delays", "patch"),
                                            ("rebuild_daily_route_delays_v2", "rebuild")])
def test_the_example_requests_load(name, strategy):
    request = load_request(f"conf/backfills/{name}.yml")
    assert request.strategy.value == strategy
    assert (request.range is None) == (strategy == "rebuild")


def test_a_stored_request_without_newer_fields_is_thesame_request():
    """A run recorded before ``publish_mode`` / ``on_source_change`` existed stays its request's own run: the
    ledger's JSON of it lacks those keys, and a run started again with its run ID must resume it, not be refused
    as another request's. A changed field still makes it another request."""
    import json

    from backfill_lib.intake.request import same_request

    request = load_request(DEMO)
    stored = json.loads(request.model_dump_json())
    for newer in ("publish_mode", "on_source_change"):
        stored.pop(newer, None)
    assert same_request(stored, request)
    assert not same_request({**stored, "owner": "someone@example.com"}, request)
    assert not same_request({**stored, "unknown_field": 1}, request)


def mart(table, *deps):
    return Mart(table=table, partition_column="month", grain="month", sql="m.sql", keys=["k"], depends_on=deps)


def test_marts_run_after_what_they_depend_on_and_cycles_are_refused():
    ordered = mart_order((mart("d.c", "d.b"), mart("d.a"), mart("d.b", "d.a")))
    assert [m.table for m in ordered] == ["d.a", "d.b", "d.c"]
    with pytest.raises(ValueError, match="dependency cycle d.a -> d.b -> d.a"):
        mart_order((mart("d.a", "d.b"), mart("d.b", "d.a")))
    with pytest.raises(ValueError, match="d.a depends on d.x, which is not a mart"):
        mart_order((mart("d.a", "d.x"),))


def test_a_monthly_mart_covers_the_months_of_the_range():
    request = BackfillRequest(name="r", owner="o", reason="why", target=Target(table="d.t", partition_column="dt"),
                              range=DateRange(start=date(2013, 1, 15), end=date(2013, 3, 2)), strategy="recompute",
                              source=Source(sql="s.sql"), keys=["k"], marts=[mart("d.m")])
    child = request.mart_request(request.marts[0])
    assert (child.range.start, child.range.end) == (date(2013, 1, 1), date(2013, 3, 1))
    assert (child.target.table, child.strategy.value, child.owner) == ("d.m", "recompute", "o")


def test_a_daily_mart_of_a_monthly_target_covers_every_day_of_its_months():
    daily = Mart(table="d.daily", partition_column="dt", grain="day", sql="m.sql", keys=["k"])
    request = BackfillRequest(name="r", owner="o", reason="why",
                              target=Target(table="d.t", partition_column="month", grain="month"),
                              range=DateRange(start=date(2024, 1, 1), end=date(2024, 2, 1)), strategy="recompute",
                              source=Source(sql="s.sql"), keys=["k"], marts=[daily, mart("d.m")])
    child = request.mart_request(daily)
    assert (child.range.start, child.range.end) == (date(2024, 1, 1), date(2024, 2, 29))  # leap February whole
    assert child.bounds() == request.bounds() == (date(2024, 1, 1), date(2024, 3, 1))
    monthly = request.mart_request(request.marts[1])
    assert (monthly.range.start, monthly.range.end) == (date(2024, 1, 1), date(2024, 2, 1))


def test_publish_mode_is_for_recompute_only(tmp_path):
    sql = tmp_path / "s.sql"
    sql.write_text("SELECT 1")
    path = write_request(tmp_path / "p.yml", owner="ana", reason="r", strategy="patch", source={"sql": str(sql)},
                         target={"table": "s.t", "partition_column": "dt"}, keys=["id"],
                         range={"start": "2024-03-09", "end": "2024-03-09"}, publish_mode="changes_only")
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert str(err.value) == (f"{path}: field 'publish_mode': changes_only applies to strategy recompute only "
                              "(got strategy patch)")
    assert load_request(write_request(tmp_path / "r.yml", owner="ana", reason="r", strategy="recompute",
                                      source={"sql": str(sql)}, target={"table": "s.t", "partition_column": "dt"},
                                      keys=["id"], range={"start": "2024-03-09", "end": "2024-03-09"})
                        ).publish_mode.value == "replace"


def _raw_request(tmp_path, range_text: str, extra: str = "") -> Path:
    """A request written as YAML text, so that dates and timestamps stay unquoted YAML values."""
    sql = tmp_path / "source.sql"
    sql.write_text("SELECT 1")
    path = tmp_path / "r.yml"
    path.write_text(f"owner: a@example.com\nreason: TICKET-1\ntarget: {{table: db.events, partition_column: dt}}\n"
                    f"range: {range_text}\ntime_zone: America/New_York\nstrategy: recompute\n"
                    f"source: {{sql: {sql}}}\nkeys: [id]\n{extra}")
    return path


@pytest.mark.parametrize("range_text, shown", [
    ("{start: 2024-02-30, end: 2024-03-01}", "'2024-02-30' at line 4 is not a date or time (day is out of range"),
    ("{start: 2024-03-01, end: 2024-13-01}", "'2024-13-01' at line 4 is not a date or time (month must be in 1..12)"),
    ("{start: 0000-01-01, end: 2024-03-01}", "'0000-01-01' at line 4 is not a date or time (year 0 is out of range)"),
])
def test_a_date_no_calendar_holds_is_a_request_error_naming_its_line(tmp_path, range_text, shown):
    path = _raw_request(tmp_path, range_text)
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert str(err.value).startswith(f"{path}: not valid YAML: {shown}")


@pytest.mark.parametrize("range_text, field, shown", [
    # a timestamp is no day of the request's zone: 2024-03-10T00:00+05:00 is 2024-03-09 in New York
    ("{start: 2024-03-10T00:00:00+05:00, end: 2024-03-11}", "start", "2024-03-10T00:00:00+05:00"),
    ("{start: 2024-03-10, end: '2024-03-11T00:00:00-07:00'}", "end", "2024-03-11T00:00:00-07:00"),
    ("{start: 0, end: 86400}", "start", "0"),  # lax pydantic read Unix seconds: 1970-01-01
    ("{start: 2024-03-10, end: 1710028800}", "end", "1710028800"),
])
def test_a_range_bound_that_is_not_a_written_date_is_refused(tmp_path, range_text, field, shown):
    path = _raw_request(tmp_path, range_text)
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert str(err.value).startswith(f"{path}: field 'range.{field}': must be a date written YYYY-MM-DD (a day of "
                                     f"the request's time_zone), got {shown}")


@pytest.mark.parametrize("field", ["batch_size", "concurrency"])
def test_a_boolean_batch_size_or_concurrency_is_refused_and_a_quoted_number_taken(tmp_path, field):
    path = _raw_request(tmp_path, "{start: 2024-03-10, end: 2024-03-11}", extra=f"{field}: true\n")
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert str(err.value) == f"{path}: field '{field}': must be a whole number, got true"
    path = _raw_request(tmp_path, "{start: 2024-03-10, end: 2024-03-11}", extra=f"{field}: '3'\n")
    assert getattr(load_request(path), field) == 3  # as before the check


@pytest.mark.parametrize("range_text, time_zone, field", [
    ('{start: "2024-03-10\\nx", end: 2024-03-11}', "UTC", "range.start"),
    ("{start: 2024-03-10, end: 2024-03-11}", '"America/New_York\\n"', "time_zone"),
])
def test_a_refusal_that_echoes_a_value_with_a_line_break_is_one_line(tmp_path, range_text, time_zone, field):
    path = _raw_request(tmp_path, range_text)
    path.write_text(path.read_text().replace("time_zone: America/New_York", f"time_zone: {time_zone}"))
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert str(err.value).startswith(f"{path}: field '{field}': ") and "\n" not in str(err.value)


def test_a_timestamp_tag_on_no_timestamp_is_a_request_error_naming_its_line(tmp_path):
    path = _raw_request(tmp_path, "{start: !!timestamp x, end: 2024-03-11}")
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert str(err.value).startswith(f"{path}: not valid YAML: 'x' at line 4 is not a date or time (")
