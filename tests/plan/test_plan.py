import dataclasses
from datetime import datetime, timezone

import pytest

from backfill_lib.core.errors import IntakeError
from backfill_lib.core.table_state import Column, PartitionStats, TableState
from backfill_lib.intake.request import load_request
from backfill_lib.plan.builder import FALLBACK_BATCH_SIZE, build_plan, staging_table_name
from backfill_lib.plan.explain import explain, human_bytes
from backfill_lib.plan.model import SourceInput, plan_from_summary

NOW = datetime(2026, 11, 30, 2, 0, tzinfo=timezone.utc)
COLUMNS = (
    Column("flight_date", "date"),
    Column("origin", "string"),
    Column("dest", "string"),
    Column("carrier", "string"),
    Column("flights", "bigint"),
)


def state(**changes):
    base = TableState(
        name="demo.daily_route_delays",
        location="file:/tmp/x",
        version=7,
        columns=COLUMNS,
        partition_columns=("flight_date",),
        partitions={
            "2013-01-01": PartitionStats(2, 1000, 265, "a"),
            "2013-03-31": PartitionStats(1, 500, 286, "b"),
            "2013-04-01": PartitionStats(9, 9000, 999, "c"),  # outside the range: never counted
        },
    )
    return dataclasses.replace(base, **changes)


def plan_for(table_state, batch_size=31):
    request = load_request("conf/backfills/fix_daily_route_delays.yml")
    return build_plan(request, table_state, request_path="r.yml", staging_schema="stg", batch_size=batch_size, now=NOW,
                      run_id="bf_test")


def test_plan_batches_partitions_and_totals_from_the_log():
    plan = plan_for(state())
    assert len(plan.partitions) == 90
    assert [len(b.partitions) for b in plan.batches] == [31, 31, 28]
    assert (plan.batches[1].keys[0], plan.batches[1].keys[-1]) == ("2013-02-01", "2013-03-03")
    assert plan.total == PartitionStats(3, 1500, 551)
    assert plan.target_version == 7
    assert plan.staging_table == "stg.demo__daily_route_delays__bf_test"
    assert plan.predicate() == "(`flight_date` >= DATE'2013-01-01' AND `flight_date` < DATE'2013-04-01')"
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.target_version = 8


def test_unknown_row_counts_stay_unknown():
    parts = {"2013-01-01": PartitionStats(1, 10, None, "x")}
    assert plan_for(state(partitions=parts)).total.rows is None


def test_run_id_derives_from_now_and_request_batch_size_wins():
    request = load_request("conf/backfills/fix_daily_route_delays.yml")
    plan = build_plan(request, state(), request_path="r", staging_schema="s", batch_size=10, now=NOW)
    assert plan.run_id.startswith("bf_20261130_020000_") and len(plan.run_id) == len("bf_20261130_020000_") + 6
    # A minted run ID cannot be in any ledger yet; a given one, or one read back from the ledger, may be.
    assert plan.run_id_minted is True
    assert plan_for(state()).run_id_minted is False
    assert plan_from_summary(plan.summary()).run_id_minted is False
    assert len(plan.batches) == 3  # the request's batch_size 31, not the settings' 10
    unbatched = request.model_copy(update={"batch_size": None})
    plan = build_plan(unbatched, state(), request_path="r", staging_schema="s", batch_size=10, now=NOW)
    assert len(plan.batches) == 9


def test_batches_sized_by_source_bytes_when_no_batch_size_is_set():
    request = load_request("conf/backfills/fix_daily_route_delays.yml").model_copy(update={"batch_size": None})

    def sizes(batch_bytes, source_input=SourceInput(), table_state=None):
        plan = build_plan(request, table_state or state(), request_path="r", staging_schema="s", batch_size=None,
                          now=NOW, source_input=source_input, batch_bytes=batch_bytes)
        return [len(b.partitions) for b in plan.batches]

    # 90 partitions reading 9,000,000 bytes: 100,000 bytes each, so 2,500,000 bytes make 25 partitions a batch.
    assert sizes(2_500_000, SourceInput(files=90, bytes=9_000_000)) == [25, 25, 25, 15]
    assert sizes(10**12, SourceInput(files=90, bytes=9_000_000)) == [90]  # never more than the range
    assert sizes(1, SourceInput(files=90, bytes=9_000_000)) == [1] * 90  # never fewer than one
    # No file-based source: the target's bytes in range (1,500 over 90 partitions, from the Delta log).
    assert sizes(500) == [30, 30, 30]
    # Nothing known (an empty target, a non-file source): the fallback size.
    assert sizes(500, table_state=state(partitions={})) == [FALLBACK_BATCH_SIZE, FALLBACK_BATCH_SIZE, 28]


def test_staging_name_keeps_catalog():
    assert staging_table_name("main.sales.orders", "stg", "bf_1") == "main.stg.sales__orders__bf_1"


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"columns": COLUMNS[1:]}, "table demo.daily_route_delays has no column flight_date"),
        ({"columns": (Column("flight_date", "string"),) + COLUMNS[1:]}, "column flight_date is string, grain day needs date"),
        ({"columns": COLUMNS[:3] + COLUMNS[4:]}, "has no key column carrier (field keys)"),
    ],
)
def test_intake_against_table_state(changes, message):
    with pytest.raises(IntakeError) as err:
        plan_for(state(**changes))
    assert message in str(err.value)


def test_explain_shows_counts_edges_and_totals():
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(explain(plan_for(state())))
    text = console.export_text()
    assert "90 x day on flight_date" in text
    assert "first 2013-01-01, last 2013-03-31" in text
    assert "3 files, 1.5 KiB, 551 rows" in text
    assert "... 70 more" in text
    assert "demo.monthly_route_delays: 3 x month (2013-01-01 .. 2013-03-01), recomputed after the target" in text
    assert "2013-04-01 " not in text.split("range")[-1].split("Partitions touched")[-1]
    assert human_bytes(1536) == "1.5 KiB" and human_bytes(12) == "12 B"


def test_hour_grain_cost_reads_deltas_utc_partition_values(tmp_path):
    from backfill_lib.intake.request import BackfillRequest

    request = BackfillRequest(
        name="h", owner="o", reason="r", strategy="recompute", keys=("id",), time_zone="America/New_York",
        target={"table": "db.hits", "partition_column": "h", "grain": "hour"},
        range={"start": "2024-03-10", "end": "2024-03-10"}, source={"sql": "x.sql"},
    )
    hits = TableState("db.hits", "file:/x", 3, (Column("id", "int"), Column("h", "timestamp")), ("h",),
                      {"2024-03-10T07:00:00.000000Z": PartitionStats(1, 100, 5, "f"),
                       "2024-03-11T07:00:00.000000Z": PartitionStats(1, 100, 9, "g")})
    plan = build_plan(request, hits, request_path="r", staging_schema="s", batch_size=24, now=NOW, run_id="bf_h")
    assert len(plan.partitions) == 23  # spring forward: the local day has 23 hours
    rows = {p.key: p.current.rows for p in plan.partitions if p.current.rows}
    assert rows == {"2024-03-10T03:00:00-04:00": 5}  # 07:00 UTC; the 11th is outside the range
    assert plan.predicate() == ("(`h` >= TIMESTAMP'2024-03-10 05:00:00+00:00' AND "
                                "`h` < TIMESTAMP'2024-03-11 04:00:00+00:00')")
