"""Intake: check a request against the live table before anything runs. Pure: takes a TableState."""

from __future__ import annotations

from collections.abc import Sequence

from backfill_lib.core.errors import IntakeError
from backfill_lib.core.partitions import RowFilter
from backfill_lib.core.table_state import Column, TableState
from backfill_lib.intake.request import BackfillRequest


def check_request_against_table(request: BackfillRequest, state: TableState, where: RowFilter | None = None) -> None:
    """Raise :class:`IntakeError` naming the table and column when the request does not fit the table.

    Checks: no table property forbids the publishing commit (:func:`check_writable`); the range's column exists and has the type its grain needs: as one of the table's partition columns
    (at any position of its partition spec) ``date`` for day and month, ``timestamp`` for hour, or ``string``
    with ``target.partition_format``; integer ``target.partition_columns``, each a partition column; as a data column (an unpartitioned or clustered table, or one partitioned
    by other columns) ``date`` for day and month or ``timestamp`` for any grain, without a format. Every key
    column exists; ``where`` (the checked ``target.where``) reads only other partition columns
    (:func:`check_where_columns`).
    """
    check_writable(f"table {state.name}", state.name, state.write_blockers)
    target = request.target
    data_column = range_in_data(request, state)
    if data_column and target.partition_format is not None:
        raise IntakeError(
            f"table {state.name} column {target.partition_column} is not a partition column "
            f"(partition columns: {', '.join(state.partition_columns) or 'none'}): target.partition_format applies "
            "to a string partition column only; a data column carrying the range must be a date or timestamp")
    check_columns_fit(f"table {state.name}", state.columns, request, data_column=data_column)
    if target.partition_columns is not None:
        for column in target.range_columns:
            if column not in state.partition_columns:
                raise IntakeError(
                    f"table {state.name} column {column} is not a partition column (partition columns: "
                    f"{', '.join(state.partition_columns) or 'none'}): target.partition_columns names the integer "
                    "partition columns that together hold the date")
    if where is not None:
        check_where_columns(state, target.range_columns, where, "field 'target.where'")


def check_writable(where: str, name: str, blockers: Sequence[str]) -> None:
    """Raise :class:`IntakeError` starting with ``where`` (``table NAME``, or ``FILE: field 'marts.N.table': table
    NAME``) when ``blockers`` (:func:`~backfill_lib.core.table_state.write_blockers_of` of table ``name``) holds a
    property under which Delta would refuse the commit that publishes the backfill, naming the property."""
    if blockers:
        raise IntakeError(
            f"{where} has table property {blockers[0]}: Delta refuses a commit that removes or rewrites rows, as "
            "publishing a backfill does (a replaceWhere, MERGE or CREATE OR REPLACE); unset it first (ALTER TABLE "
            f"{name} UNSET TBLPROPERTIES ('{blockers[0].split(' = ')[0]}')) or backfill another table")


def range_in_data(request: BackfillRequest, state: TableState) -> bool:
    """Whether the request's range is on a data column of ``state`` rather than on one of its partition columns
    (an unpartitioned or liquid-clustered table, or one partitioned by other columns)."""
    column = request.target.partition_column
    if request.target.partition_columns is not None:
        return False
    return state.column(column) is not None and column not in state.partition_columns


def check_where_columns(state: TableState, range_columns: str | tuple[str, ...], where: RowFilter, at: str) -> None:
    """Raise :class:`IntakeError` starting with ``at`` unless every column ``where`` reads is a partition column
    of ``state`` other than ``range_columns`` (the range's column, or its integer date parts): the publish
    predicate then stays partition-only, and the plan's cost and the fence can select ``where``'s files from the
    Delta log's partition values."""
    ranged = (range_columns,) if isinstance(range_columns, str) else range_columns
    others = [c for c in state.partition_columns if c not in ranged]
    for column in where.columns:
        if column in ranged:
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
    month), and every key column. With integer date parts (``target.partition_columns``) the partition column is
    their label, no column: each part must be an integer column instead (:func:`_check_parts_fit`;
    ``data_column`` does not apply). The one check of both sides: the target at plan time, a rebuild's source
    (whose other columns may change) at run time."""
    target = request.target
    if target.partition_columns is not None:
        _check_parts_fit(where, columns, request)
        return
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


_INTEGERS = ("tinyint", "smallint", "int", "bigint")


def _check_parts_fit(where: str, columns: Sequence[Column], request: BackfillRequest) -> None:
    """:func:`check_columns_fit` for integer date parts: each is an integer column, and every key column exists."""
    parts = request.target.partition_columns
    by_name = {c.name: c for c in columns}
    for part in ("year", "month", "day", "hour"):
        name = getattr(parts, part)
        if name is None:
            continue
        col = by_name.get(name)
        if col is None:
            raise IntakeError(f"{where} has no column {name} (field target.partition_columns.{part})")
        if col.type not in _INTEGERS:
            raise IntakeError(f"{where} column {name} is {col.type}: target.partition_columns.{part} must be an "
                              "integer column (tinyint, smallint, int or bigint)")
    for key in request.keys:
        if key not in by_name:
            raise IntakeError(f"{where} has no key column {key} (field keys)")


def check_not_own_table(field: str, name: str, own_schemas: dict[str, str], current_schema: str,
                        request_path: str) -> None:
    """Raise :class:`IntakeError` when catalog table ``name`` (the request's ``field``) is in one of the product's
    own schemas: ``own_schemas`` maps a settings field (``ledger_schema``, ``staging_schema``) to its schema name.
    A name without a schema is in ``current_schema`` (the session's current database). Names compare
    case-insensitively, as Spark's session catalog does; a path-based name is left to
    :func:`check_not_own_location`.

    Raises
    ------
    IntakeError
        ``"{request_path}: field '{field}': table {name} is in schema S, the settings' ledger_schema (...)"``.
    """
    from backfill_lib.core.table_names import split_table_name, table_path

    if table_path(name) is not None:
        return
    parts = split_table_name(name) or []
    schema = parts[-2] if len(parts) >= 2 else current_schema
    for setting, own in own_schemas.items():
        if schema.lower() == own.lower():
            raise IntakeError(f"{request_path}: field '{field}': table {name} is in schema {own}, the settings' "
                              f"{setting}, {_OWN_ROLE[setting]}; a backfill never writes the product's own tables")


def check_not_own_location(field: str, name: str, location: str, own_locations: dict[str, tuple[str, str]],
                           request_path: str) -> None:
    """Raise :class:`IntakeError` when the Delta table ``name`` (the request's ``field``) at ``location`` lies in
    the directory of one of the product's own schemas: ``own_locations`` maps a settings field
    (``ledger_schema``, ``staging_schema``) to ``(schema, directory)``. Catches a path-based name
    (``delta.`<warehouse>/backfill_ledger.db/runs```) and an external table placed there.

    Raises
    ------
    IntakeError
        ``"{request_path}: field '{field}': table {name} at LOCATION is in the directory of schema S, ..."``.
    """
    here = _bare_location(location) + "/"
    for setting, (own, directory) in own_locations.items():
        if directory and here.startswith(_bare_location(directory) + "/"):
            raise IntakeError(f"{request_path}: field '{field}': table {name} at {_bare_location(location)} is in the "
                              f"directory of schema {own}, the settings' {setting}, {_OWN_ROLE[setting]}; a "
                              "backfill never writes the product's own tables")


def _bare_location(location: str) -> str:
    """``location`` without a trailing slash, a local one without its ``file:`` scheme (``file:///x/`` -> ``/x``)."""
    from backfill_lib.core.table_names import location_key

    key = location_key(location)
    return key[len("file:"):] if key.startswith("file:/") else key


_OWN_ROLE = {"ledger_schema": "which holds delta-backfill's run ledger",
             "staging_schema": "which holds delta-backfill's staging tables"}
