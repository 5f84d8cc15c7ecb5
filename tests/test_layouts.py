"""Issue 18, first items: string date partitions (``target.partition_format``), the range's column at any
position of the partition spec, ``target.where``, and what ``backfill plan`` says of the layout.

The pure tests (no Spark) come first; the Spark tests run real backfills on tiny inline Delta tables."""

from __future__ import annotations

import dataclasses
import json
from datetime import date, datetime, timezone

import pytest
from rich.console import Console

from backfill_lib.core.errors import IntakeError, PartitionError, RequestError
from backfill_lib.core.partition_format import PartitionFormat
from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.partitions import (
    Grain,
    RowFilter,
    enumerate_partitions,
    half_open,
    partition_of_key,
    partitions_predicate,
)
from backfill_lib.core.table_state import Column, PartitionStats, TableState
from backfill_lib.intake.request import BackfillRequest, load_request
from backfill_lib.plan.explain import explain
from backfill_lib.plan.model import build_plan, plan_from_summary
from backfill_lib.strategies.kinds import kind_for

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
UTC = timezone.utc


# --- pure: the pattern --------------------------------------------------------------------------------------

@pytest.mark.parametrize("pattern, grain, start, zone, text", [
    ("yyyy-MM-dd", "day", date(2024, 3, 9), "UTC", "2024-03-09"),
    ("yyyyMMdd", "day", date(2024, 3, 9), "UTC", "20240309"),
    ("yyyy/M/d", "day", date(2024, 3, 9), "UTC", "2024/3/9"),
    ("'dt='yyyy-MM-dd", "day", date(2024, 3, 9), "UTC", "dt=2024-03-09"),
    ("yyyy-MM", "month", date(2024, 3, 1), "UTC", "2024-03"),
    ("yyyy-MM-dd", "month", date(2024, 3, 1), "UTC", "2024-03-01"),
    ("yyyy-MM-dd-HH", "hour", datetime(2024, 3, 10, 7, tzinfo=UTC), "America/New_York", "2024-03-10-03"),
    ("yyyy-MM-dd HH:mm:ss", "hour", datetime(2024, 3, 10, 7, tzinfo=UTC), "UTC", "2024-03-10 07:00:00"),
    ("yyyy-MM-dd'T'HH:mmXXX", "hour", datetime(2024, 11, 3, 6, tzinfo=UTC), "America/New_York",
     "2024-11-03T01:00-05:00"),
    ("yyyy-MM-dd'T'HHXXX", "hour", datetime(2024, 3, 10, 7, tzinfo=UTC), "UTC", "2024-03-10T07Z"),
    ("yyyy-MM-dd'T'HHxx", "hour", datetime(2024, 3, 10, 7, tzinfo=UTC), "UTC", "2024-03-10T07+0000"),
    ("yyyyMMddHHX", "hour", datetime(2024, 3, 10, 6, 30, tzinfo=UTC), "Asia/Kolkata", "2024031012+0530"),
    ("yyyy-MM-dd HHZ", "hour", datetime(2024, 3, 10, 7, tzinfo=UTC), "Europe/Paris", "2024-03-10 08+0100"),
])
def test_a_pattern_renders_a_partition_start_as_spark_does_and_parses_it_back(pattern, grain, start, zone, text):
    fmt = PartitionFormat.of(pattern)
    assert fmt.render(start, grain, zone) == text
    assert fmt.parse(text, grain, zone) == start


def test_a_value_must_be_exactly_in_the_pattern_and_a_loose_read_says_which_partition_it_meant():
    fmt = PartitionFormat.of("yyyy-MM-dd")
    for value in ("2024-3-9", "2024/03/09", "2024-03-09 ", "2024-02-30", "x"):
        with pytest.raises(PartitionError, match=f"partition value '{value}' is not a yyyy-MM-dd value"):
            fmt.parse(value, "day", "UTC")
    assert [fmt.loose_start(v, "day", "UTC") for v in ("2024-3-9", "2024/03/09", "20240309", "x", "2024-02-30")] == [
        date(2024, 3, 9), date(2024, 3, 9), date(2024, 3, 9), None, None]
    month = PartitionFormat.of("yyyy-MM-dd")
    with pytest.raises(PartitionError, match="'2024-03-05' is not a yyyy-MM-dd value"):
        month.parse("2024-03-05", "month", "UTC")  # not a month's first day
    hour = PartitionFormat.of("yyyy-MM-dd'T'HH:mmXXX")
    with pytest.raises(PartitionError, match="'2024-11-03T01:00\\+00:00' is not"):
        hour.parse("2024-11-03T01:00+00:00", "hour", "America/New_York")  # the zone's offset then was -04:00
    with pytest.raises(PartitionError, match="'2024-03-10T02:00-05:00' is not"):
        hour.parse("2024-03-10T02:00-05:00", "hour", "America/New_York")  # 02:00 did not exist that night


@pytest.mark.parametrize("pattern, grain, message", [
    ("yyyy-MM-ddTHH", "hour", "pattern letter 'T' is not supported for partitions"),
    ("yy-MM-dd", "day", "'yy' is not supported (use yyyy)"),
    ("yyyy-MMM-dd", "day", "'MMM' is not supported (use M or MM)"),
    ("yyyy-MM-dd'", "day", "has an unclosed quote"),
    ("yyyy-MM", "day", "'yyyy-MM' has no day (grain day needs year, month, day)"),
    ("yyyy-MM-dd HH", "day", "'yyyy-MM-dd HH' renders hour, finer than or beside grain day"),
    ("yyyy-MM-dd", "hour", "'yyyy-MM-dd' has no hour (grain hour needs year, month, day, hour)"),
    ("yyyy-MM-dd-dd", "day", "'yyyy-MM-dd-dd' renders the day twice"),
])
def test_a_bad_pattern_is_refused_when_the_request_is_read(tmp_path, pattern, grain, message):
    path = write_layout_request(tmp_path, {"table": "db.events", "partition_column": "dt", "grain": grain,
                                           "partition_format": pattern})
    with pytest.raises(RequestError) as err:
        load_request(path)
    assert f"field 'target.partition_format': partition_format '{pattern}'" in str(err.value)
    assert message in str(err.value)


def test_a_where_is_refused_for_a_rebuild_and_when_blank(tmp_path):
    target = {"table": "db.events", "partition_column": "dt", "where": "region = 'EU'"}
    with pytest.raises(RequestError, match="field 'target.where': a rebuild re-creates the whole table; where "
                                           "applies to recompute and patch"):
        load_request(write_layout_request(tmp_path, target, strategy="rebuild"))
    with pytest.raises(RequestError, match="field 'target.where': must not be blank"):
        load_request(write_layout_request(tmp_path, {**target, "where": "  "}))


# --- pure: keys and predicates ------------------------------------------------------------------------------

def test_string_partitions_are_keyed_by_their_strings_and_selected_by_an_in_list():
    start, end = half_open(date(2024, 3, 8), date(2024, 3, 10), Grain.DAY, "UTC")
    parts = enumerate_partitions(start, end, Grain.DAY, "UTC", "yyyyMMdd")
    assert [p.key for p in parts] == ["20240308", "20240309", "20240310"]
    assert partition_of_key("20240309", Grain.DAY, "UTC", "yyyyMMdd") == parts[1]
    assert partitions_predicate("dt", parts, formatted=True) == "(`dt` IN ('20240308', '20240309', '20240310'))"
    assert partitions_predicate("dt", parts[1:2], "t", formatted=True) == "(t.`dt` = '20240309')"
    assert partitions_predicate("dt", parts, formatted=True, shown=1) == "(`dt` IN ('20240308', ... 1 more ..., '20240310'))"
    quoted = enumerate_partitions(start, start + (end - start) / 3, Grain.DAY, "UTC", "''yyyy-MM-dd''")
    assert partitions_predicate("dt", quoted, formatted=True) == "(`dt` = '\\'2024-03-08\\'')"


def test_partition_keys_of_a_string_column_pass_its_values_and_render_a_typed_source_column_in_the_format():
    keys = PartitionKeys("dt", Grain.DAY, "UTC", "yyyyMMdd")
    assert keys.holds_keys and keys.key("20240309") == "20240309"
    assert keys.rekey({"20240309": 3, None: 1}) == {"20240309": 3, None: 1}
    source = keys.of("d")  # a rule's DATE column, keyed as the string target's plan keys
    assert (source.column, source.holds_keys) == ("d", False)
    assert source.key("2024-03-09") == "20240309"
    assert source.key_of_value(date(2024, 3, 9)) == "20240309"
    assert source.rekey({"2024-03-09": 3}) == {"20240309": 3}
    hours = PartitionKeys("ts", Grain.HOUR, "America/New_York", "yyyy-MM-dd-HH", string_column=False)
    assert hours.key("2024-03-10T07:00:00Z") == "2024-03-10-03"
    assert hours.key_of_value(datetime(2024, 3, 10, 7, tzinfo=UTC)) == "2024-03-10-03"
    plain = PartitionKeys("dt", Grain.DAY, "UTC")
    assert (plain.holds_keys, plain.key("2024-03-09"), plain.of("d").key("2024-03-09")) == (False, "2024-03-09", "2024-03-09")


STRING_COLUMNS = (Column("id", "int"), Column("dt", "string"), Column("v", "int"))
REGION_COLUMNS = (Column("id", "int"), Column("region", "string"), Column("dt", "date"), Column("v", "int"))
EU = RowFilter("region = 'EU'", "(region = 'EU')", "(t.region = 'EU')", ("region",))


def layout_request(target: dict, start="2024-03-09", end="2024-03-09", strategy="recompute", **extra) -> BackfillRequest:
    return BackfillRequest.model_validate({
        "name": "layout", "owner": "ana@example.com", "reason": "TEST-18", "target": target,
        "range": {"start": start, "end": end}, "time_zone": extra.pop("time_zone", "UTC"), "strategy": strategy,
        "source": {"sql": "s.sql"}, "keys": ["id"], **extra})


def table(columns, partition_columns, partitions, name="db.events") -> TableState:
    return TableState(name, "file:/tmp/events", 4, columns, partition_columns, partitions)


def plan_of(request, state, where=None):
    return build_plan(request, state, request_path="r.yml", staging_schema="stg", batch_size=None, now=NOW,
                      run_id="bf_layout", where=where)


def test_a_string_plan_takes_its_cost_from_the_log_values_and_refuses_values_of_the_range_not_in_the_format():
    target = {"table": "db.events", "partition_column": "dt", "partition_format": "yyyyMMdd"}
    log = {"20240308": PartitionStats(1, 100, 2, "a"), "20240309": PartitionStats(2, 300, 5, "b"),
           "20240311": PartitionStats(1, 50, 1, "c")}
    plan = plan_of(layout_request(target, "2024-03-08", "2024-03-10"), table(STRING_COLUMNS, ("dt",), log))
    assert [(p.key, p.current.rows) for p in plan.partitions] == [("20240308", 2), ("20240309", 5), ("20240310", 0)]
    assert plan.total == PartitionStats(3, 400, 7)
    assert plan.predicate() == "(`dt` IN ('20240308', '20240309', '20240310'))"
    assert plan.partition_keys == PartitionKeys("dt", Grain.DAY, "UTC", "yyyyMMdd")

    odd = {**log, "2024039": PartitionStats(1, 10, 1, "d"), "2024-03-10": PartitionStats(1, 10, 1, "e"),
           "unknown": PartitionStats(1, 10, 1, "f"), "20240301": PartitionStats(1, 10, 1, "g")}
    with pytest.raises(IntakeError) as err:
        plan_of(layout_request(target, "2024-03-08", "2024-03-10"), table(STRING_COLUMNS, ("dt",), odd))
    assert str(err.value) == (
        "table db.events column dt holds partition values in the range that do not match target.partition_format "
        "yyyyMMdd: '2024-03-10'; the run would leave their rows beside the recomputed ones (rewrite them in the "
        "format first)")


def test_a_string_or_typed_column_must_fit_the_format():
    with pytest.raises(IntakeError, match="column dt is string, grain day needs date \\(a string column needs "
                                          "target.partition_format, e.g. yyyy-MM-dd\\)"):
        plan_of(layout_request({"table": "db.events", "partition_column": "dt"}), table(STRING_COLUMNS, ("dt",), {}))
    with pytest.raises(IntakeError, match="column dt is date: target.partition_format applies to a string column"):
        plan_of(layout_request({"table": "db.events", "partition_column": "dt", "partition_format": "yyyy-MM-dd"}),
                table(REGION_COLUMNS, ("region", "dt"), {}))


def test_hour_strings_across_daylight_saving_changes():
    target = {"table": "db.events", "partition_column": "h", "grain": "hour", "partition_format": "yyyy-MM-dd-HH"}
    columns = (Column("id", "int"), Column("h", "string"))
    spring = plan_of(layout_request(target, "2024-03-10", "2024-03-10", time_zone="America/New_York"),
                     table(columns, ("h",), {"2024-03-10-03": PartitionStats(1, 10, 4, "x")}))
    keys = [p.key for p in spring.partitions]
    assert len(keys) == 23 and keys[:4] == ["2024-03-10-00", "2024-03-10-01", "2024-03-10-03", "2024-03-10-04"]
    assert spring.partitions[2].current.rows == 4
    assert spring.write_time_zone == "America/New_York"  # strings need no UTC writes
    with pytest.raises(IntakeError) as err:  # the fall-back repeats 01:00: one string for two hours
        plan_of(layout_request(target, "2024-11-03", "2024-11-03", time_zone="America/New_York"),
                table(columns, ("h",), {}))
    assert str(err.value) == (
        "field 'target.partition_format': yyyy-MM-dd-HH renders the hours 2024-11-03T05:00+00:00 and "
        "2024-11-03T06:00+00:00 (UTC) as the same value '2024-11-03-01' in America/New_York (a daylight-saving "
        "fall-back): their rows cannot be told apart in h; use a format with an offset (e.g. "
        "yyyy-MM-dd'T'HH:mmXXX), time_zone UTC if the column holds UTC hours, or a range that does not cross the "
        "fall-back")
    offset = {**target, "partition_format": "yyyy-MM-dd'T'HH:mmXXX"}
    fall = plan_of(layout_request(offset, "2024-11-03", "2024-11-03", time_zone="America/New_York"),
                   table(columns, ("h",), {}))
    assert [p.key for p in fall.partitions][1:3] == ["2024-11-03T01:00-04:00", "2024-11-03T01:00-05:00"]
    assert len(fall.partitions) == 25
    utc = plan_of(layout_request(target, "2024-11-03", "2024-11-03"), table(columns, ("h",), {}))
    assert len({p.key for p in utc.partitions}) == 24


def test_the_range_column_at_any_position_and_a_where_on_the_other_partition_columns():
    target = {"table": "db.events", "partition_column": "dt", "where": "region = 'EU'"}
    log = {"2024-03-09": PartitionStats(1, 100, 2, "eu9")}  # read within the where: EU's files only
    state = table(REGION_COLUMNS, ("region", "dt"), log)
    plan = plan_of(layout_request(target), state, EU)
    assert [(p.key, p.current.rows) for p in plan.partitions] == [("2024-03-09", 2)]
    assert plan.predicate() == "(`dt` >= DATE'2024-03-09' AND `dt` < DATE'2024-03-10') AND ((region = 'EU'))"
    assert plan.partition_predicate() == "(`dt` >= DATE'2024-03-09' AND `dt` < DATE'2024-03-10')"
    assert plan.predicate(qualifier="t") == (
        "(t.`dt` >= DATE'2024-03-09' AND t.`dt` < DATE'2024-03-10') AND ((t.region = 'EU'))")
    assert plan.partition_spec == ("region", "dt")
    assert kind_for(plan.strategy).publish_statement(plan) == (
        "replaceWhere on db.events: (`dt` >= DATE'2024-03-09' AND `dt` < DATE'2024-03-10') AND ((region = 'EU'))")
    patch = plan_of(layout_request(target, strategy="patch"), state, EU)
    assert kind_for(patch.strategy).publish_statement(patch) == (
        "MERGE INTO db.events t USING staged s ON t.`id` <=> s.`id` AND (t.`dt` >= DATE'2024-03-09' AND "
        "t.`dt` < DATE'2024-03-10') AND ((t.region = 'EU'))")

    again = plan_from_summary(json.loads(json.dumps(plan.summary())))
    assert (again.where, again.partition_spec, again.predicate()) == (EU, ("region", "dt"), plan.predicate())

    with pytest.raises(IntakeError, match="field 'target.where': 'region = 'EU'' was not checked against table"):
        plan_of(layout_request(target), state)  # a where no analyzer has seen is never run
    on_data = RowFilter("v > 1", "(v > 1)", "(t.v > 1)", ("v",))
    with pytest.raises(IntakeError, match="'v > 1' reads v, which is not a partition column of table db.events "
                                          "\\(partition columns: region, dt\\); where narrows by the other"):
        plan_of(layout_request({**target, "where": "v > 1"}), state, on_data)
    on_range = RowFilter("dt > '2024-01-01'", "(dt > DATE'2024-01-01')", "(t.dt > DATE'2024-01-01')", ("dt",))
    with pytest.raises(IntakeError, match="reads dt, the column the range selects; where narrows by the other "
                                          "partition columns \\(region\\)"):
        plan_of(layout_request({**target, "where": "dt > '2024-01-01'"}), state, on_range)
    with pytest.raises(IntakeError, match="is not partitioned by dt \\(partition columns: region\\)"):
        plan_of(layout_request({"table": "db.events", "partition_column": "dt"}), dataclasses.replace(
            state, partition_columns=("region",)))


def test_backfill_plan_says_which_layout_it_found_and_the_statement_that_publishes():
    target = {"table": "db.events", "partition_column": "dt", "partition_format": "yyyy-MM-dd",
              "where": "region = 'EU'"}
    columns = (Column("id", "int"), Column("region", "string"), Column("dt", "string"), Column("v", "int"))
    state = table(columns, ("region", "dt"), {"2024-03-02": PartitionStats(1, 2048, 3, "x")})
    plan = plan_of(layout_request(target, "2024-03-01", "2024-03-31"), state, EU)
    console = Console(record=True, width=400)
    console.print(explain(plan))
    lines = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in console.export_text().splitlines()
             if "  " in line and not line.startswith(("│", "┃", "┏", "┡", "└"))}
    assert lines["layout"] == ("partitioned by (region, dt); the range is on dt (string in partition_format "
                               "yyyy-MM-dd, grain day), column 2 of 2; each partition's cost sums its files over region")
    assert lines["where"] == ("region = 'EU' (analysed: (region = 'EU')); only the range's rows where it holds are "
                              "staged, validated and published, the others are not touched, and a source row outside "
                              "it fails the run")
    assert lines["publish statement"] == (
        "replaceWhere on db.events: (`dt` IN ('2024-03-01', '2024-03-02', '2024-03-03', ... 25 more ..., "
        "'2024-03-29', '2024-03-30', '2024-03-31')) AND ((region = 'EU'))")
    assert lines["current data in range"] == "1 files, 2.0 KiB, 3 rows (from the Delta log)"


def write_layout_request(tmp_path, target: dict, strategy: str = "recompute", **extra):
    from tests.conftest import write_request

    sql = tmp_path / "layout.sql"
    if not sql.exists():
        sql.write_text("SELECT 1 AS id")
    fields = {"owner": "ana@example.com", "reason": "TEST-18: layouts", "target": target,
              "range": {"start": "2024-03-09", "end": "2024-03-09"}, "time_zone": "UTC", "strategy": strategy,
              "source": {"sql": str(sql)}, "keys": ["id"], **extra}
    return write_request(tmp_path / "layout.yml", **fields)
