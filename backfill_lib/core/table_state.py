"""A Delta table as the plan sees it: columns, per-partition cost, constraints (pure value types).

The adapters read them from the Delta log (:mod:`backfill_lib.adapters.delta_log`); planning and intake only
read these values, so they need no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backfill_lib.core.file_ranges import FileRange


@dataclass(frozen=True)
class Column:
    """One column of a table schema: name, Spark SQL type string (``simpleString``), nullability."""

    name: str
    type: str
    nullable: bool = True


@dataclass(frozen=True)
class PartitionStats:
    """What the Delta log says about one partition: data files, their bytes, their rows (``numRecords``).

    ``rows`` is ``None`` when a file was written without statistics. ``fingerprint`` is a hash of the sorted
    data file paths: it changes exactly when a commit adds or removes a file of the partition.
    """

    files: int = 0
    bytes: int = 0
    rows: int | None = 0
    fingerprint: str = ""


#: Table property prefix of Delta's CHECK constraints: ``delta.constraints.<name>`` holds the expression's SQL.
CHECK_PROPERTY_PREFIX = "delta.constraints."


@dataclass(frozen=True)
class Constraint:
    """A constraint Delta enforces on every row written to a table (Delta protocol, "Column Invariants" and
    "CHECK Constraints"): a ``CHECK`` named ``name`` whose SQL is ``expression``, or, with ``column`` set, the
    column's ``NOT NULL``.

    Delta refuses a row when a CHECK expression is false *or NULL* (verified on Delta 4.4: ``CHECK (v >= 0)``
    refuses ``v = NULL``), unlike SQL's table constraints; :attr:`label` is how checks name it.
    """

    name: str
    expression: str | None = None
    column: str | None = None

    @property
    def label(self) -> str:
        """``c: CHECK (v >= 0)`` or ``NOT NULL v``."""
        if self.column is not None:
            return f"NOT NULL {self.column}"
        return f"{self.name}: CHECK ({self.expression})"


def constraints_of(properties: dict[str, str], columns: tuple[Column, ...]) -> tuple[Constraint, ...]:
    """The CHECK constraints among a Delta table's ``properties`` (by name) and a ``NOT NULL`` per non-nullable
    top-level column of ``columns`` (in column order). Pure."""
    checks = sorted((k[len(CHECK_PROPERTY_PREFIX):], v) for k, v in (properties or {}).items()
                    if k.lower().startswith(CHECK_PROPERTY_PREFIX))
    return (tuple(Constraint(name, expression) for name, expression in checks)
            + tuple(Constraint(c.name, column=c.name) for c in columns if not c.nullable))


#: Column metadata key of a Delta generated column (Delta protocol, "Generated Columns"): the expression's SQL.
GENERATION_EXPRESSION_KEY = "delta.generationExpression"


@dataclass(frozen=True)
class GeneratedColumn:
    """A column Delta computes on write: ``name`` (of Spark SQL type ``type``) is
    ``GENERATED ALWAYS AS (expression)``, an expression over other columns of the same row.

    Delta fills it when a write omits it and otherwise refuses a row whose value is not ``name <=> expression``
    (verified on Delta 4.4, for ``replaceWhere`` overwrites and MERGE alike), evaluating ``expression`` in the
    writing session's time zone (``CAST(ts AS DATE)`` is the local date there). :attr:`label` is how checks and
    the plan name it."""

    name: str
    type: str
    expression: str

    @property
    def label(self) -> str:
        """``generated: event_date = CAST(ts AS DATE)``."""
        return f"generated: {self.name} = {self.expression}"


def generated_columns_of(fields) -> tuple[GeneratedColumn, ...]:
    """The generated columns among ``fields``: ``(name, type, metadata)`` triples of a table's top-level schema
    (``metadata`` the field's metadata dict, as in a Delta schemaString), in column order. Pure."""
    return tuple(GeneratedColumn(name, type_, str(metadata[GENERATION_EXPRESSION_KEY]))
                 for name, type_, metadata in fields if (metadata or {}).get(GENERATION_EXPRESSION_KEY))


@dataclass(frozen=True)
class TableState:
    """A Delta table as of one version.

    ``partitions`` maps Delta partition-value strings (``YYYY-MM-DD`` for a date column, the strings of a string
    column) of one partition column (the range's, as read for the plan; by default the first) to their stats,
    summed over the other partition columns and counting only the files of a ``target.where`` when read with one. ``change_data_feed`` is whether the table property ``delta.enableChangeDataFeed`` is
    ``true``: every commit then also records its changed rows for ``table_changes`` / ``readChangeFeed``.
    ``constraints`` are the CHECK and NOT NULL constraints Delta enforces on writes
    (:func:`constraints_of`); ``column_mapping`` is the table's ``delta.columnMapping.mode`` (``none``, ``name``
    or ``id``); ``generated`` its generated columns (:func:`generated_columns_of`).

    ``clustering_columns`` are the table's liquid clustering columns (``DESCRIBE DETAIL``'s
    ``clusteringColumns``; ``()`` when not clustered). ``files`` is set when the range's column is a data column
    (not a partition column): the data files whose statistics overlap the range (every file without
    statistics), from which the plan takes its cost (:mod:`backfill_lib.core.file_ranges`); ``partitions`` is
    then empty.

    ``write_blockers`` are the table's properties under which Delta refuses the commit every backfill publishes
    with (:func:`write_blockers_of`), as ``key = value``.
    """

    name: str
    location: str
    version: int
    columns: tuple[Column, ...]
    partition_columns: tuple[str, ...]
    partitions: dict[str, PartitionStats] = field(default_factory=dict)
    change_data_feed: bool = False
    constraints: tuple[Constraint, ...] = ()
    column_mapping: str = "none"
    clustering_columns: tuple[str, ...] = ()
    files: "tuple[FileRange, ...] | None" = None
    generated: tuple[GeneratedColumn, ...] = ()
    write_blockers: tuple[str, ...] = ()

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)


def write_blockers_of(properties: dict[str, str]) -> tuple[str, ...]:
    """The table properties among ``properties`` under which Delta refuses a commit that removes or rewrites rows
    (a ``replaceWhere`` overwrite, a MERGE that updates or deletes, a ``CREATE OR REPLACE``), as
    ``"delta.appendOnly = true"``: ``delta.appendOnly`` set to true (Delta protocol, "Append-only Tables"; keys and
    values compared case-insensitively). Pure."""
    blockers = []
    for key, value in sorted((properties or {}).items()):
        if key.lower() == "delta.appendonly" and str(value).strip().lower() == "true":
            blockers.append(f"{key} = {value}")
    return tuple(blockers)


def column_mapping_mode(properties: dict[str, str]) -> str:
    """A Delta table's column mapping mode from its ``properties``: ``none``, ``name`` or ``id``. Pure."""
    return (properties or {}).get("delta.columnMapping.mode", "none").lower()
