"""A Delta table as the plan sees it: columns, per-partition cost, constraints (pure value types).

The adapters read them from the Delta log (:mod:`backfill_lib.adapters.delta_log`); planning and intake only
read these values, so they need no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

#: Delta truncates timestamp statistics to milliseconds; a file's true maximum is below ``max + 1 ms``.
STATS_TIMESTAMP_PRECISION = timedelta(milliseconds=1)


@dataclass(frozen=True)
class FileRange:
    """One data file of the log and the values of the range's column in it.

    ``low`` and ``high`` are the column's ``minValues`` and ``maxValues`` (inclusive): ``date`` for a ``DATE``
    column, an aware UTC ``datetime`` for a ``TIMESTAMP`` one (truncated to milliseconds by Delta); both
    ``None`` when the file has no statistics for the column (its values are unknown). ``rows`` is the file's
    ``numRecords`` less its deletion vector's rows, ``None`` without statistics. ``nulls`` is the column's
    ``nullCount`` (rows in no partition; ``None``: unknown).
    """

    path: str
    bytes: int
    rows: int | None
    low: date | datetime | None
    high: date | datetime | None
    nulls: int | None = 0

    @property
    def has_stats(self) -> bool:
        return self.low is not None and self.high is not None

    def reach(self, timestamps: bool) -> date | datetime:
        """The exclusive upper bound of the file's values: past ``high`` by a day (dates) or by the millisecond
        Delta truncated (timestamps)."""
        return self.high + (STATS_TIMESTAMP_PRECISION if timestamps else timedelta(days=1))

    def rows_within(self, start, end, timestamps: bool) -> int | None:
        """The file's rows when every one of them lies in ``[start, end)`` (its min/max inside, no NULL in the
        column, its row count known), else ``None``: the file's rows there are unknown."""
        if not self.has_stats or self.rows is None or self.nulls != 0:
            return None
        return self.rows if self.low >= start and self.reach(timestamps) <= end else None


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


#: Field metadata Delta sets on an IDENTITY column: ``true`` for ``GENERATED BY DEFAULT``, ``false`` for ``ALWAYS``.
IDENTITY_EXPLICIT_INSERT_KEY = "delta.identity.allowExplicitInsert"


@dataclass(frozen=True)
class IdentityColumn:
    """A column Delta numbers itself: ``name`` (of Spark SQL type ``type``) is ``GENERATED ALWAYS AS IDENTITY``
    (``always``: Delta refuses any value a write supplies) or ``GENERATED BY DEFAULT AS IDENTITY`` (a write may
    supply values, which Delta keeps; a row without one gets the next number). Either way Delta refuses an
    ``UPDATE`` (so a MERGE's ``SET``) of the column, and ``CREATE OR REPLACE TABLE ... AS SELECT`` from a plain
    query re-creates it as a plain column; from a query whose column carries the ``delta.identity.*`` field
    metadata (:func:`identity_metadata_of`) it stays an IDENTITY column with that definition (verified on Delta 4.4).
    Values a write supplies never move the column's high-water mark (``delta.identity.highWaterMark``: the last
    number Delta handed out; the next is it plus the step), only ``ALTER TABLE ... ALTER COLUMN ... SYNC IDENTITY``
    does (:func:`synced_high_water_mark`)."""

    name: str
    type: str
    always: bool
    #: its definition: the first number and the step (``None``: not read, as in a plan of an older release)
    start: int | None = None
    step: int | None = None
    #: the last number Delta handed out (``None``: none yet)
    high_water_mark: int | None = None

    @property
    def label(self) -> str:
        """``GENERATED ALWAYS AS IDENTITY`` or ``GENERATED BY DEFAULT AS IDENTITY``."""
        return f"GENERATED {'ALWAYS' if self.always else 'BY DEFAULT'} AS IDENTITY"

    @property
    def definition(self) -> str:
        """``GENERATED BY DEFAULT AS IDENTITY (START WITH 1 INCREMENT BY 1), high-water mark 3`` (``none`` when it
        has none)."""
        if self.start is None or self.step is None:
            return self.label
        mark = "none" if self.high_water_mark is None else str(self.high_water_mark)
        return f"{self.label} (START WITH {self.start} INCREMENT BY {self.step}), high-water mark {mark}"


#: The field metadata keys of an IDENTITY column's definition in a Delta schemaString.
IDENTITY_START_KEY = "delta.identity.start"
IDENTITY_STEP_KEY = "delta.identity.step"
IDENTITY_HIGH_WATER_MARK_KEY = "delta.identity.highWaterMark"


def identity_metadata_of(fields) -> dict[str, dict]:
    """``{column: {delta.identity.* key: value}}`` of the IDENTITY columns among ``fields`` (``(name, metadata)``
    pairs of a table's top-level schema, ``metadata`` as in a Delta schemaString): each column's definition
    (start, step, whether a write may supply values) and high-water mark, as Delta keeps them. Pure."""
    found = {}
    for name, metadata in fields:
        kept = {k: v for k, v in (metadata or {}).items() if k.startswith("delta.identity.")}
        if IDENTITY_EXPLICIT_INSERT_KEY in kept:
            found[name] = kept
    return found


def synced_high_water_mark(start: int, step: int, mark: int | None, low: int | None, high: int | None) -> int | None:
    """The high-water mark an IDENTITY column (numbered from ``start`` by ``step``, its mark ``mark``) holds after
    a write of values from ``low`` to ``high`` (``None``: no value), as ``ALTER TABLE ... ALTER COLUMN ... SYNC
    IDENTITY`` would set it: the written value farthest in the step's direction, if at or past the start, rounded
    on to the sequence's next number (start + k * step), unless the mark is already past it; ``mark`` when no value
    is past the start (verified on Delta 4.4: start 100 step 10 and a value 5003 give 5010; start -1 step -5 and
    -100 give -101; values 1 and 2 under start 100 leave none). Pure."""
    value = high if step > 0 else low
    if value is None or (value < start if step > 0 else value > start):
        return mark
    aligned = start + -(-(value - start) // step) * step  # the sequence's first number at or past the value
    if mark is None:
        return aligned
    return max(mark, aligned) if step > 0 else min(mark, aligned)


def identity_columns_of(fields) -> tuple[IdentityColumn, ...]:
    """The IDENTITY columns among ``fields``: ``(name, type, metadata)`` triples of a table's top-level schema
    (``metadata`` the field's metadata dict, as in a Delta schemaString), in column order. Pure."""
    def number(metadata: dict, key: str) -> int | None:
        return None if metadata.get(key) is None else int(metadata[key])

    return tuple(IdentityColumn(name, type_, str(metadata[IDENTITY_EXPLICIT_INSERT_KEY]).lower() != "true",
                                number(metadata, IDENTITY_START_KEY), number(metadata, IDENTITY_STEP_KEY),
                                number(metadata, IDENTITY_HIGH_WATER_MARK_KEY))
                 for name, type_, metadata in fields if IDENTITY_EXPLICIT_INSERT_KEY in (metadata or {}))


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
    or ``id``); ``generated`` its generated columns (:func:`generated_columns_of`), ``identity`` its IDENTITY
    columns (:func:`identity_columns_of`).

    ``clustering_columns`` are the table's liquid clustering columns (``DESCRIBE DETAIL``'s
    ``clusteringColumns``; ``()`` when not clustered). ``files`` is set when the range's column is a data column
    (not a partition column): the data files whose statistics overlap the range (every file without
    statistics), from which the plan takes its cost (:mod:`backfill_lib.core.file_ranges`); ``partitions`` is
    then empty.

    ``write_blockers`` are what the table has under which Delta refuses the commit every backfill publishes with:
    properties (:func:`write_blockers_of`, :func:`uniform_blockers`) and writer features this Delta does not
    support (:func:`unsupported_feature_blockers`).
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
    files: tuple[FileRange, ...] | None = None
    generated: tuple[GeneratedColumn, ...] = ()
    write_blockers: "tuple[WriteBlocker, ...]" = ()
    identity: tuple[IdentityColumn, ...] = ()

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True)
class WriteBlocker:
    """Something a table has under which Delta refuses the commit that publishes a backfill: ``what`` it is
    (``table property delta.appendOnly = true``, ``writer table feature F``), ``why`` Delta refuses, and ``fix``,
    what the user can do (``{name}`` stands for the table's name). :meth:`message` is the intake refusal."""

    what: str
    why: str
    fix: str

    def message(self, at: str, name: str) -> str:
        """``{at} has {what}: {why}; {fix}`` (``at``: ``table NAME``, or a request's field and table)."""
        return f"{at} has {self.what}: {self.why}; {self.fix.format(name=name)}"


#: Delta refuses a commit that removes rows of an append-only table: every publishing commit does.
APPEND_ONLY_WHY = ("Delta refuses a commit that removes or rewrites rows, as publishing a backfill does (a "
                   "replaceWhere, MERGE or CREATE OR REPLACE)")

#: UniForm formats (``delta.universalFormat.enabledFormats``) and the class of Delta's converter each needs on the
#: classpath: without it Delta refuses every commit to the table (``DELTA_MISSING_ICEBERG_CLASS``, Delta 4.4).
UNIFORM_CONVERTERS = {"iceberg": ("org.apache.spark.sql.delta.icebergShaded.IcebergConverter", "delta-iceberg"),
                      "hudi": ("org.apache.spark.sql.delta.hudi.HudiConverter", "delta-hudi")}


def write_blockers_of(properties: dict[str, str]) -> tuple[WriteBlocker, ...]:
    """The table properties among ``properties`` under which Delta refuses a commit that removes or rewrites rows
    (a ``replaceWhere`` overwrite, a MERGE that updates or deletes, a ``CREATE OR REPLACE``):
    ``delta.appendOnly`` set to true (Delta protocol, "Append-only Tables"; keys and values compared
    case-insensitively; Delta 4.4 refuses even a ``replaceWhere`` of partitions that hold no rows). Pure."""
    blockers = []
    for key, value in sorted((properties or {}).items()):
        if key.lower() == "delta.appendonly" and str(value).strip().lower() == "true":
            blockers.append(WriteBlocker(
                f"table property {key} = {value}", APPEND_ONLY_WHY,
                f"unset it first (ALTER TABLE {{name}} UNSET TBLPROPERTIES ('{key}')) or backfill another table"))
    return tuple(blockers)


def unsupported_feature_blockers(features, supported, delta: str = "the Delta Lake of this session",
                                 reader: bool = False) -> tuple[WriteBlocker, ...]:
    """The table's writer ``features`` (its protocol's ``writerFeatures``, reader-writer ones included; with
    ``reader``, its ``readerFeatures``) that ``supported`` (the names of the features ``delta``, the session's Delta
    Lake, knows; compared case-insensitively, as Delta does) lacks: Delta refuses every commit to such a table
    (``DELTA_UNSUPPORTED_FEATURES_FOR_WRITE``; for a reader feature every read too). Pure."""
    known = {str(f).lower() for f in supported}
    missing = sorted(str(f) for f in features if str(f).lower() not in known)
    if not missing:
        return ()
    plural = "s" if len(missing) > 1 else ""
    kind = "reader" if reader else "writer"
    refuses = "to read or write" if reader else "any commit to"
    return (WriteBlocker(
        f"{kind} table feature{plural} {', '.join(missing)}",
        f"{delta} does not support {'them' if plural else 'it'}, and Delta refuses {refuses} a table that requires "
        f"a {kind} feature it does not support" + ("" if reader else " (publishing a backfill is one commit)"),
        f"run the backfill with a Delta Lake release that supports {'them' if plural else 'it'}, or backfill "
        "another table"),)


def uniform_blockers(properties: dict[str, str], loadable) -> tuple[WriteBlocker, ...]:
    """The UniForm formats ``properties`` enable (``delta.universalFormat.enabledFormats``, comma-separated)
    whose converter class is not ``loadable`` (a callable taking a class name): Delta refuses every commit to
    such a table when it cannot convert it (:data:`UNIFORM_CONVERTERS`). Pure."""
    found = []
    for key, value in sorted((properties or {}).items()):
        if key.lower() != "delta.universalformat.enabledformats":
            continue
        for fmt in (part.strip().lower() for part in str(value).split(",")):
            if fmt in UNIFORM_CONVERTERS and not loadable(UNIFORM_CONVERTERS[fmt][0]):
                cls, package = UNIFORM_CONVERTERS[fmt]
                found.append(WriteBlocker(
                    f"table property {key} = {value}",
                    f"Delta refuses every commit to a UniForm {fmt} table unless it can convert it, and this "
                    f"session's classpath lacks Delta's {fmt} converter ({cls}, from the {package} package)",
                    f"run the backfill in a session with {package} installed, or backfill another table"))
    return tuple(found)


def column_mapping_mode(properties: dict[str, str]) -> str:
    """A Delta table's column mapping mode from its ``properties``: ``none``, ``name`` or ``id``. Pure."""
    return (properties or {}).get("delta.columnMapping.mode", "none").lower()
