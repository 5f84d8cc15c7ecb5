"""Intake: check a request against the live table before anything runs. Pure: takes a TableState."""

from __future__ import annotations

from collections.abc import Sequence

from backfill_lib.core.errors import IntakeError
from backfill_lib.core.partitions import RowFilter
from backfill_lib.core.table_state import Column, TableState
from backfill_lib.intake.request import BackfillRequest


def check_request_against_table(request: BackfillRequest, state: TableState, where: RowFilter | None = None) -> None:
    """Raise :class:`IntakeError` naming the table and column when the request does not fit the table.

    Checks: the range's column exists and has the type its grain needs: as one of the table's partition columns
    (at any position of its partition spec) ``date`` for day and month, ``timestamp`` for hour, or ``string``
    with ``target.partition_format``; as a data column (an unpartitioned or clustered table, or one partitioned
    by other columns) ``date`` for day and month or ``timestamp`` for any grain, without a format. Every key
    column exists; ``where`` (the checked ``target.where``) reads only other partition columns
    (:func:`check_where_columns`).
    """
    target = request.target
    data_column = range_in_data(request, state)
    if data_column and target.partition_format is not None:
        raise IntakeError(
            f"table {state.name} column {target.partition_column} is not a partition column "
            f"(partition columns: {', '.join(state.partition_columns) or 'none'}): target.partition_format applies "
            "to a string partition column only; a data column carrying the range must be a date or timestamp")
    check_columns_fit(f"table {state.name}", state.columns, request, data_column=data_column)
    if where is not None:
        check_where_columns(state, target.partition_column, where, "field 'target.where'")


def range_in_data(request: BackfillRequest, state: TableState) -> bool:
    """Whether the request's range is on a data column of ``state`` rather than on one of its partition columns
    (an unpartitioned or liquid-clustered table, or one partitioned by other columns)."""
    column = request.target.partition_column
    return state.column(column) is not None and column not in state.partition_columns


def check_where_columns(state: TableState, range_column: str, where: RowFilter, at: str) -> None:
    """Raise :class:`IntakeError` starting with ``at`` unless every column ``where`` reads is a partition column
    of ``state`` other than ``range_column``: the publish predicate then stays partition-only, and the plan's cost
    and the fence can select ``where``'s files from the Delta log's partition values."""
    others = [c for c in state.partition_columns if c != range_column]
    for column in where.columns:
        if column == range_column:
            raise IntakeError(f"{at}: '{where.text}' reads {column}, the column the range selects; where narrows by "
                              f"the other partition columns ({', '.join(others) or 'none'})")
        if column not in others:
            raise IntakeError(f"{at}: '{where.text}' reads {column}, which is not a partition column of table "
                              f"{state.name} (partition columns: {', '.join(state.partition_columns) or 'none'}); "
                              f"where narrows by the other partition columns only")


def check_columns_fit(where: str, columns: Sequence[Column], request: BackfillRequest, *,
                      data_column: bool = False) -> None:
    """Raise :class:`IntakeError` starting with ``where`` (``table NAME``, or a source file) unless ``columns``
    hold the request's partition column, of the type its grain needs (``date`` for day and month, ``timestamp``
    for hour; ``string`` with a ``partition_format``; a ``data_column`` may also be a ``timestamp`` for day and
    month), and every key column. The one check of both sides: the target at plan time, a rebuild's source
    (whose other columns may change) at run time."""
    target = request.target
    col = next((c for c in columns if c.name == target.partition_column), None)
    if col is None:
        raise IntakeError(f"{where} has no column {target.partition_column} (field target.partition_column)")
    if target.partition_format is not None:
        if col.type != "string":
            raise IntakeError(f"{where} column {col.name} is {col.type}: target.partition_format applies to a string "
                              f"column (leave it out for a {col.type} column)")
    elif data_column and col.type in ("date", "timestamp"):
        if col.type == "date" and target.grain.spark_type != "date":
            raise IntakeError(f"{where} column {col.name} is date, grain {target.grain.value} needs a timestamp")
    elif col.type != target.grain.spark_type:
        hint = " (a string column needs target.partition_format, e.g. yyyy-MM-dd)" if col.type == "string" else ""
        needs = target.grain.spark_type
        if data_column:
            hint = " (a data column carrying the range must be a date or a timestamp)"
            needs = "date or timestamp" if needs == "date" else needs
        raise IntakeError(f"{where} column {col.name} is {col.type}, grain {target.grain.value} needs {needs}{hint}")
    names = {c.name for c in columns}
    for key in request.keys:
        if key not in names:
            raise IntakeError(f"{where} has no key column {key} (field keys)")
