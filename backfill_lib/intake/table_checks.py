"""Intake: check a request against the live table before anything runs. Pure: takes a TableState."""

from __future__ import annotations

from collections.abc import Sequence

from backfill_lib.core.errors import IntakeError
from backfill_lib.core.table_state import Column, TableState
from backfill_lib.intake.request import BackfillRequest


def check_request_against_table(request: BackfillRequest, state: TableState) -> None:
    """Raise :class:`IntakeError` naming the table and column when the request does not fit the table.

    Checks: the partition column exists, is the table's first partition column, and has the type the grain
    needs (``date`` for day and month, ``timestamp`` for hour); every key column exists.
    """
    target = request.target
    if state.column(target.partition_column) is not None and (
            not state.partition_columns or state.partition_columns[0] != target.partition_column):
        have = ", ".join(state.partition_columns) or "none"
        raise IntakeError(
            f"table {state.name} is not partitioned by {target.partition_column} (partition columns: {have})"
        )
    check_columns_fit(f"table {state.name}", state.columns, request)


def check_columns_fit(where: str, columns: Sequence[Column], request: BackfillRequest) -> None:
    """Raise :class:`IntakeError` starting with ``where`` (``table NAME``, or a source file) unless ``columns``
    hold the request's partition column, of the type its grain needs (``date`` for day and month, ``timestamp``
    for hour), and every key column. The one check of both sides: the target at plan time, a rebuild's source
    (whose other columns may change) at run time."""
    target = request.target
    col = next((c for c in columns if c.name == target.partition_column), None)
    if col is None:
        raise IntakeError(f"{where} has no column {target.partition_column} (field target.partition_column)")
    if col.type != target.grain.spark_type:
        raise IntakeError(f"{where} column {col.name} is {col.type}, grain {target.grain.value} needs "
                          f"{target.grain.spark_type}")
    names = {c.name for c in columns}
    for key in request.keys:
        if key not in names:
            raise IntakeError(f"{where} has no key column {key} (field keys)")
