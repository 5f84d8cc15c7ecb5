"""Intake: check a request against the live table before anything runs. Pure: takes a TableState."""

from __future__ import annotations

from backfill_lib.core.errors import IntakeError
from backfill_lib.core.table_state import TableState
from backfill_lib.intake.request import BackfillRequest


def check_request_against_table(request: BackfillRequest, state: TableState) -> None:
    """Raise :class:`IntakeError` naming the table and column when the request does not fit the table.

    Checks: the partition column exists, is the table's first partition column, and has the type the grain
    needs (``date`` for day and month, ``timestamp`` for hour); every key column exists.
    """
    target = request.target
    col = state.column(target.partition_column)
    if col is None:
        raise IntakeError(f"table {state.name} has no column {target.partition_column} (field target.partition_column)")
    if not state.partition_columns or state.partition_columns[0] != target.partition_column:
        have = ", ".join(state.partition_columns) or "none"
        raise IntakeError(
            f"table {state.name} is not partitioned by {target.partition_column} (partition columns: {have})"
        )
    if col.type != target.grain.spark_type:
        raise IntakeError(
            f"table {state.name} column {col.name} is {col.type}, grain {target.grain.value} needs "
            f"{target.grain.spark_type}"
        )
    for key in request.keys:
        if state.column(key) is None:
            raise IntakeError(f"table {state.name} has no key column {key} (field keys)")
