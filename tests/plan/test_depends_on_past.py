"""Issue 19, item 3: planning an order-dependent table (``depends_on_past``). Pure: no Spark session."""

from __future__ import annotations

import dataclasses
from datetime import date, datetime, timezone

import pytest
import yaml
from rich.console import Console

from backfill_lib.core.errors import RequestError
from backfill_lib.core.table_state import Column, PartitionStats, TableState
from backfill_lib.intake.request import load_request
from backfill_lib.plan.builder import build_plan
from backfill_lib.plan.explain import explain, past_line
from backfill_lib.plan.model import SourceInput, SourceVersion, plan_from_summary

NOW = datetime(2026, 12, 2, 4, 0, tzinfo=timezone.utc)


def write_totals_request(tmp_path, **changes):
    sql = tmp_path / "totals.sql"
    sql.write_text("SELECT e.day, e.key, e.amount + coalesce(p.total, 0) AS total FROM db.events e "
                   "LEFT JOIN db.totals p ON p.key = e.key AND p.day = date_sub(e.day, 1) "
                   "WHERE e.day >= :range_start AND e.day < :range_end")
    fields = {"owner": "ana@example.com", "reason": "TEST-19: running totals",
              "target": {"table": "db.totals", "partition_column": "day"},
              "range": {"start": "2024-03-09", "end": "2024-03-12"}, "time_zone": "UTC", "strategy": "recompute",
              "source": {"sql": str(sql)}, "keys": ["day", "key"], "depends_on_past": True, **changes}
    path = tmp_path / "totals.yml"
    path.write_text(yaml.safe_dump(fields, sort_keys=False))
    return path


def totals_state(location="file:/tmp/totals"):
    columns = (Column("day", "date"), Column("key", "string"), Column("total", "bigint"))
    parts = {k: PartitionStats(1, 1000, 2, k) for k in ("2024-03-08", "2024-03-09", "2024-03-10", "2024-03-11",
                                                        "2024-03-12")}
    return TableState("db.totals", location, 5, columns, ("day",), parts)


def plan_of(request, batch_size=None, **changes):
    plan = build_plan(request, totals_state(), request_path="totals.yml", staging_schema="stg",
                      batch_size=batch_size, now=NOW, run_id="bf_past",
                      source_input=SourceInput(3, 10**12))  # bytes that would put one partition per batch anyway
    return dataclasses.replace(plan, **changes)


def text_of(plan) -> str:
    console = Console(width=400, record=True, file=open("/dev/null", "w"))
    console.print(explain(plan))
    return console.export_text()


def test_each_partition_is_its_own_batch_in_the_ranges_order_whatever_the_settings_batch_size(tmp_path):
    request = load_request(write_totals_request(tmp_path))
    assert request.depends_on_past
    plan = plan_of(request, batch_size=31)  # the settings' size does not apply
    assert [(b.index, b.keys) for b in plan.batches] == [
        (0, ("2024-03-09",)), (1, ("2024-03-10",)), (2, ("2024-03-11",)), (3, ("2024-03-12",))]
    assert plan.batches[1].start == date(2024, 3, 10) and plan.batches[1].end == date(2024, 3, 11)
    # without the flag the same request stages the range in one batch of the settings' size
    plain = plan_of(load_request(write_totals_request(tmp_path, depends_on_past=False)), batch_size=31)
    assert [b.keys for b in plain.batches] == [("2024-03-09", "2024-03-10", "2024-03-11", "2024-03-12")]


def test_the_flag_and_its_batches_round_trip_through_the_ledger_summary(tmp_path):
    plan = plan_of(load_request(write_totals_request(tmp_path, batch_size=1, concurrency=1)))
    summary = plan.summary()
    assert summary["depends_on_past"] is True and summary["request"]["depends_on_past"] is True
    back = plan_from_summary(summary)
    assert back.request.depends_on_past
    assert [b.keys for b in back.batches] == [b.keys for b in plan.batches] and len(back.batches) == 4


def test_the_plan_says_batches_run_in_order_reading_the_staged_previous_partition(tmp_path):
    plan = plan_of(load_request(write_totals_request(tmp_path)))
    text = text_of(plan)
    assert ("depends_on_past: batches run in order, one partition at a time (concurrency 1); each reads the staged "
            "previous partitions of db.totals instead of the published ones (its other rows at version 5)") in text
    assert "1 batch at a time (depends_on_past)" in text
    assert "4 of 1 partition each" in text and "up to 1 partitions" not in text


def test_the_batches_line_reads_naturally_for_equal_and_unequal_batches(tmp_path):
    from backfill_lib.plan.explain import batches_line

    request = load_request(write_totals_request(tmp_path, depends_on_past=False))
    assert batches_line(plan_of(request, batch_size=3)) == "2 of up to 3 partitions each"  # 3 + 1
    assert batches_line(plan_of(request, batch_size=2)) == "2 of 2 partitions each"
    assert batches_line(plan_of(request, batch_size=31)) == "1 of 4 partitions"


def test_without_the_flag_the_plan_says_when_the_source_reads_the_target_itself(tmp_path):
    plain = plan_of(load_request(write_totals_request(tmp_path, depends_on_past=False)))
    assert past_line(plain) is None  # pins unknown yet
    pins = (SourceVersion("db.events", 3, "file:/tmp/events"), SourceVersion("db.totals", 5, "file:///tmp/totals/"))
    line = past_line(dataclasses.replace(plain, source_versions=pins))
    assert line == ("the source SQL reads db.totals itself, at version 5 (its rows before this run); if a partition "
                    "derives from an earlier partition of the range, set depends_on_past")
    assert past_line(dataclasses.replace(plain, source_versions=pins[:1])) is None


@pytest.mark.parametrize("changes, message", [
    ({"strategy": "rebuild"}, "field 'depends_on_past': applies to strategy recompute only (got strategy rebuild"),
    ({"strategy": "patch"}, "field 'depends_on_past': applies to strategy recompute only (got strategy patch"),
    ({"batch_size": 2}, "field 'batch_size': must be 1 or left out with depends_on_past (got 2)"),
    ({"concurrency": 4}, "field 'concurrency': must be 1 or left out with depends_on_past (got 4)"),
])
def test_what_cannot_run_in_order_is_refused_when_the_request_is_read(tmp_path, changes, message):
    with pytest.raises(RequestError) as err:
        load_request(write_totals_request(tmp_path, **changes))
    assert message in str(err.value)
    assert str(err.value).startswith(str(tmp_path / "totals.yml"))
    assert "\n" not in str(err.value)


def test_replacing_the_targets_references_keeps_an_alias_for_columns_qualified_by_the_table():
    from backfill_lib.plan.past_reads import TargetReference, replace_target, same_location

    text = "SELECT totals.total FROM db.totals JOIN db.totals p ON p.key = totals.key"
    refs = [TargetReference(25, 33, False, "totals"), TargetReference(40, 48, True, "totals")]
    assert text[25:34] == text[40:49] == "db.totals"
    assert replace_target(text, refs, "bf_past_r_1") == (
        "SELECT totals.total FROM bf_past_r_1 AS `totals` JOIN bf_past_r_1 p ON p.key = totals.key")
    assert same_location("file:///tmp/x/", "file:/tmp/x") and not same_location("file:/tmp/x", "file:/tmp/xy")
    assert not same_location(None, "file:/tmp/x")
