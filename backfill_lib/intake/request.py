"""The backfill request: a frozen model loaded from ``conf/backfills/NAME.yml``.

A request says what to backfill (target table, partition column, grain, inclusive date range, time zone), how
(strategy, source SQL, keys, expectation suite, reconciliation rules) and who asks and why (owner, reason).
Relative paths inside a request resolve against the working directory (the project root).
"""

from __future__ import annotations

import enum
import re
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from backfill_lib.core.date_parts import PART_NAMES, parts_of_grain
from backfill_lib.core.date_parts import label as date_parts_label
from backfill_lib.core.errors import PartitionError, RequestError
from backfill_lib.core.partition_format import PartitionFormat
from backfill_lib.core.partitions import Grain, half_open, zone
from backfill_lib.core.safe_yaml import load as load_yaml
from backfill_lib.core.table_names import check_table_name, same_table_key
from backfill_lib.intake.rules import DiffGate, MetricSpec
from backfill_lib.intake.sql_text import single_query


#: A table name of a request: ``[catalog.]schema.table`` (parts plain or back-quoted) or ``delta.`<absolute path>```,
#: kept in its canonical spelling (:func:`~backfill_lib.core.table_names.check_table_name`, whose ``ValueError`` names
#: what is wrong).
TableName = Annotated[str, AfterValidator(check_table_name)]


class Strategy(str, enum.Enum):
    """How the target is rewritten.

    - ``recompute``: re-derive every row of each partition in range; publish replaces exactly those partitions
      (``replaceWhere``) in one commit.
    - ``rebuild``: re-create the whole table (new logic or schema) from the source; publish swaps it in with
      one ``CREATE OR REPLACE TABLE ... AS SELECT`` commit, which keeps history so RESTORE can undo it.
    - ``patch``: corrected rows for given keys; publish is one MERGE on the null-safe keys plus the range.
    """

    RECOMPUTE = "recompute"
    REBUILD = "rebuild"
    PATCH = "patch"

    @property
    def whole_table(self) -> bool:
        """Whether the strategy stages, validates and publishes the whole table (a rebuild) rather than the
        range: it stages in one batch, compares whole tables and always publishes."""
        return self is Strategy.REBUILD


class PublishMode(str, enum.Enum):
    """How a recompute's publishing commit writes the range (the table ends the same either way).

    - ``replace``: one ``replaceWhere`` commit that removes every target row in range and writes every staged
      row; on a table with the Change Data Feed on, every row of every partition is a delete and an insert.
    - ``changes_only``: one MERGE on the null-safe keys (plus the partition column) and the range literal that
      updates only rows where some column differs, inserts new keys and deletes target rows in range whose key
      is not staged, so the feed carries the real changes only.
    """

    REPLACE = "replace"
    CHANGES_ONLY = "changes_only"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DatePartColumns(_Frozen):
    """Integer partition columns that together name a partition (``PARTITIONED BY (y, m, d)``): the column of each
    part (:mod:`backfill_lib.core.date_parts`). A ``day`` grain needs year, month and day; ``month`` year and
    month; ``hour`` all four (the hour of the request's ``time_zone`` wall clock)."""

    year: str
    month: str
    day: str | None = None
    hour: str | None = None

    def columns(self) -> tuple[str, ...]:
        """The named columns, widest first."""
        return tuple(c for c in (self.year, self.month, self.day, self.hour) if c is not None)


class Target(_Frozen):
    """The Delta table to backfill: catalog name ``[catalog.]schema.table`` or path-based name ``delta.`<absolute
    path>``` (:func:`backfill_lib.core.table_names.check_table_name`, kept in its canonical spelling), the partition
    column that carries the range and its grain, and the layout around it.

    - ``partition_column`` may be at any position of the table's partition spec (``PARTITIONED BY (region,
      event_date)``); it is a ``DATE`` (day, month) or ``TIMESTAMP`` (hour) column, or a ``STRING`` one with
      ``partition_format``. It may also be a data column of an unpartitioned or liquid-clustered table (or one
      partitioned by other columns): a ``DATE`` (day, month) or ``TIMESTAMP`` (any grain; days in the request's
      ``time_zone``), whose partitions' cost comes from the files' min/max statistics
      (:mod:`backfill_lib.core.file_ranges`).
    - ``partition_format``: the Spark datetime pattern of a ``STRING`` partition column (``yyyy-MM-dd``,
      ``yyyyMMdd``, ``yyyy-MM-dd-HH``; see :mod:`backfill_lib.core.partition_format`).
    - ``partition_columns`` instead of ``partition_column``: integer partition columns that together carry the
      range (``{year: y, month: m, day: d}``, :class:`DatePartColumns`); ``partition_column`` is then their label
      (``y/m/d``), no column of the table.
    - ``where``: a SQL predicate on the table's other partition columns (``region = 'EU'``) that narrows the
      backfill: staging, validation, diff and publish cover exactly the range and ``where``; the range's rows
      outside it are never touched. Checked at intake by Spark's analyzer
      (:func:`backfill_lib.intake.where_check.check_where`).
    """

    #: `[catalog.]schema.table`, or a path-based name delta.`<absolute path>`
    table: TableName
    #: the column that carries the range (a partition column, or a data column of an unpartitioned or clustered table)
    partition_column: str
    #: the size of one partition: `day`, `month` or `hour`
    grain: Grain = Grain.DAY
    #: the Spark datetime pattern of a `STRING` partition column (`yyyyMMdd`)
    partition_format: str | None = None
    #: a SQL predicate on the table's other partition columns that narrows a recompute or patch (`region = 'EU'`)
    where: str | None = None
    #: integer partition columns that together carry the range, instead of `partition_column`
    partition_columns: DatePartColumns | None = None

    @model_validator(mode="before")
    @classmethod
    def _label_parts(cls, data: object) -> object:
        # partition_columns names the range's columns; partition_column is then their label, set here
        if isinstance(data, dict) and isinstance(data.get("partition_columns"), dict):
            try:
                parts = DatePartColumns.model_validate(data["partition_columns"])
            except ValidationError:
                return data  # the field's own validation names what is wrong
            name = date_parts_label(parts.columns())
            given = data.get("partition_column")
            if given is not None and given != name:
                raise ValueError("give partition_column (one column) or partition_columns (integer year/month/day/"
                                 "hour columns), not both")
            data = {**data, "partition_column": name}
        return data

    @property
    def range_columns(self) -> tuple[str, ...]:
        """The table's columns that carry the range: the integer parts, or ``partition_column``."""
        return self.partition_columns.columns() if self.partition_columns else (self.partition_column,)

    @field_validator("where")
    @classmethod
    def _where_text(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank (leave it out to backfill every partition of the range)")
        return None if value is None else value.strip()

    @model_validator(mode="after")
    def _format_fits_grain(self) -> "Target":
        if self.partition_columns is not None:
            parts = self.partition_columns
            if self.partition_format is not None:
                raise ValueError("partition_format applies to one string partition column, not to partition_columns")
            need = parts_of_grain(self.grain)
            given = tuple(n for n in PART_NAMES if getattr(parts, n) is not None)
            if given != need:
                raise ValueError(f"partition_columns: grain {self.grain.value} needs exactly the parts "
                                 f"{', '.join(need)} (given: {', '.join(given)})")
            if len(set(parts.columns())) != len(parts.columns()):
                raise ValueError(f"partition_columns: one column names two parts ({', '.join(parts.columns())})")
        if self.partition_format is not None:
            try:
                PartitionFormat.of(self.partition_format).check_grain(self.grain.value)
            except PartitionError as exc:
                raise ValueError(f"partition_format: {exc}") from None
        return self


class DateRange(_Frozen):
    """Inclusive local dates as the user writes them; see :func:`backfill_lib.core.partitions.half_open`."""

    #: first local day of the range, `YYYY-MM-DD` (at `grain: month`, the first day of a month)
    start: date
    #: last local day of the range, included, `YYYY-MM-DD` (at `grain: month`, any day of the last month)
    end: date

    @field_validator("start", "end", mode="before")
    @classmethod
    def _a_date(cls, value: object) -> object:
        # Lax pydantic reads 0 as 1970-01-01 (Unix seconds) and cuts a timestamp with any offset to its date:
        # a bound is a local date of the request's time_zone, written YYYY-MM-DD, nothing else.
        text = value.isoformat() if isinstance(value, date) and not isinstance(value, datetime) else value
        if not isinstance(text, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            raise ValueError(f"must be a date written YYYY-MM-DD (a day of the request's time_zone), "
                             f"got {_shown(value.isoformat() if isinstance(value, date) else value)}")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> "DateRange":
        if self.end < self.start:
            raise ValueError(f"end {self.end.isoformat()} is before start {self.start.isoformat()}")
        return self


class Source(_Frozen):
    """Where the corrected rows come from: a SQL file run with ``:range_start`` and ``:range_end`` bound.

    The two parameters are the half-open bounds of the partitions being staged (``DATE`` for day and month
    grains, ``TIMESTAMP`` for hours): the SQL must return rows with ``range_start <= partition < range_end``.
    """

    #: the SQL file (one read-only query) that yields the corrected rows
    sql: Path


class SourceMetric(_Frozen):
    """A metric computed on a source table per partition, for reconciliation."""

    table: TableName
    partition_column: str
    #: SQL aggregate over the source table's rows of the partition (`count(*)`)
    metric: str


class ReconciliationRule(_Frozen):
    """``metric`` on the staged rows must equal ``source.metric`` per partition, within ``tolerance``.

    Both metrics are SQL aggregate expressions (for example ``sum(flights)`` and ``count(*)``); values are
    compared exactly as integers or decimals, never through floating point.
    """

    #: the check's name in the report
    name: str
    #: SQL aggregate over the staged rows (`sum(flights)`)
    metric: str
    source: SourceMetric
    tolerance: float = Field(default=0, ge=0)


class SourceTable(_Frozen):
    """A source table and its partition column, for metric profiles."""

    table: TableName
    partition_column: str


class MetricRule(_Frozen):
    """Metrics (row, null and NaN counts, exact sums, min/max, checksum) of the staged rows must equal the same
    metrics of ``source`` per partition, within ``metrics.tolerance``; both sides in one pass each."""

    name: str
    source: SourceTable
    metrics: MetricSpec


class Gates(_Frozen):
    """Row-count gates per partition, staged rows against the target's current rows.

    A partition losing more than ``max_row_loss_fraction`` of its rows (an emptied partition loses all of
    them) blocks publishing unless ``allow_row_loss`` is true. ``max_row_growth_fraction`` (``None``: no
    limit) blocks partitions that grow more, unless ``allow_row_growth``. Applies to recompute and rebuild;
    a patch only changes the rows it names.
    """

    max_row_loss_fraction: float = Field(default=0.10, ge=0, le=1)
    allow_row_loss: bool = False
    max_row_growth_fraction: float | None = Field(default=None, ge=0)
    allow_row_growth: bool = False


class Mart(_Frozen):
    """A downstream table derived from the target, recomputed after the target publishes, under the same run ID.

    ``sql`` runs with ``:range_start`` / ``:range_end`` bound to the mart's partitions covering the request's
    range (for a ``month`` mart, the months that hold its days). ``depends_on`` names other marts of the request
    that must publish first.
    """

    #: the mart table
    table: TableName
    partition_column: str
    grain: Grain = Grain.DAY
    #: the SQL file deriving the mart from the target, with `:range_start` / `:range_end`
    sql: Path
    #: the columns that identify a mart row
    keys: tuple[str, ...] = Field(min_length=1)
    #: a Great Expectations suite for the mart's staged rows
    expectations: Path | None = None
    #: other marts of this request (by table) that must publish first
    depends_on: tuple[str, ...] = ()

    @field_validator("depends_on")
    @classmethod
    def _dependency_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # spelt as the marts' tables are (a path-based name canonical), so a dependency matches its mart
        out = []
        for name in value:
            try:
                out.append(check_table_name(name))
            except ValueError:  # no mart has this name: mart_order names it
                out.append(name)
        return tuple(out)


def mart_order(marts: tuple[Mart, ...]) -> tuple[Mart, ...]:
    """``marts`` in dependency order (a mart after every mart it ``depends_on``; otherwise as listed).

    Raises
    ------
    ValueError
        Naming an unknown dependency or a cycle.
    """
    # one table however its name is cased (Spark's catalogs ignore case): `Sales.Daily` depends on `sales.daily`
    by_table = {same_table_key(m.table): m for m in marts}
    for m in marts:
        for dep in m.depends_on:
            if same_table_key(dep) not in by_table:
                raise ValueError(f"marts: {m.table} depends on {dep}, which is not a mart of this request")
    ordered: list[Mart] = []
    visiting: set[str] = set()

    def visit(m: Mart, path: tuple[str, ...]) -> None:
        if m in ordered:
            return
        if m.table in visiting:
            raise ValueError(f"marts: dependency cycle {' -> '.join((*path, m.table))}")
        visiting.add(m.table)
        for dep in m.depends_on:
            visit(by_table[same_table_key(dep)], (*path, m.table))
        visiting.discard(m.table)
        ordered.append(m)

    for m in marts:
        visit(m, ())
    return tuple(ordered)


class BackfillRequest(_Frozen):
    """A checked backfill request. See ``conf/backfills/fix_daily_route_delays.yml`` for a full example."""

    #: the request's name (loaded from a file: the file's name without `.yml` unless given); `--only` compares the
    #: runs of the same name and target
    name: str
    #: who asks for the backfill (an e-mail or team), recorded in the ledger and the commit's `userMetadata`
    owner: str = Field(min_length=1)
    #: why (a ticket and a sentence), recorded in the ledger and the commit's `userMetadata`
    reason: str = Field(min_length=1)
    target: Target
    range: DateRange | None = None
    #: IANA zone of the partitions' local dates and hours, and the Spark session zone every SQL of the run runs in
    time_zone: str = "UTC"
    strategy: Strategy
    publish_mode: PublishMode = PublishMode.REPLACE
    source: Source
    #: the columns that identify a row (null-safe): each must occur once in the staged rows; the diff and MERGE
    #: match on them
    keys: tuple[str, ...] = Field(min_length=1)
    #: a Great Expectations suite (JSON) run on the staged rows of the whole range
    expectations: Path | None = None
    reconciliation: tuple[ReconciliationRule, ...] = ()
    metric_rules: tuple[MetricRule, ...] = ()
    gates: Gates = Field(default_factory=Gates)
    diff_gate: DiffGate | None = None
    #: SQL aggregate charted per partition, before versus after, in the report (unset: `count(*)`)
    report_metric: str | None = None
    #: patch only: also delete the rows in range whose key the source no longer yields
    delete_missing: bool = False
    #: a rebuild's schema differences that can lose values or names (a narrowed, retyped, dropped or renamed
    #: column): ``refuse`` (exit 2 before anything is written) or ``allow``; widened and added columns always pass
    schema_changes: Literal["refuse", "allow"] = "refuse"
    #: partitions staged per Spark job (unset: the settings' `batch_size`, else sized by `batch_bytes`)
    batch_size: int | None = Field(default=None, ge=1)
    #: batches staged at once, as concurrent Spark jobs (unset: the settings' `concurrency`)
    concurrency: int | None = Field(default=None, ge=1, le=64)
    marts: tuple[Mart, ...] = ()
    #: what publishing does when a source the run read at a pinned version changed in the range since:
    #: ``report`` (a failed ``source_snapshot`` check; the pinned rows are published) or ``refuse`` (exit 4)
    on_source_change: Literal["report", "refuse"] = "report"
    #: the target is order-dependent (a cumulative or SCD2 table whose partition N is derived from partition N-1 of
    #: the target itself): each partition is its own batch, staged strictly in order, one at a time, and the source
    #: SQL's references to the target read the target as it will be (this run's staged partitions, the target's
    #: rows as the plan saw them elsewhere; :mod:`backfill_lib.run.past`). Recompute only.
    depends_on_past: bool = False
    #: where validated rows wait for the publish commit: ``durable`` (a staging Delta table per run, kept for
    #: review and resume), ``pinned`` (held by the run's Spark session, written once, by the publish commit) or
    #: ``auto`` (pinned for one batch straight through, else durable); unset, the settings' ``staging``. A pinned
    #: run that stops before publishing resumes by recomputing.
    staging: Literal["auto", "durable", "pinned"] | None = None

    @field_validator("batch_size", "concurrency", mode="before")
    @classmethod
    def _no_boolean(cls, value: object) -> object:
        # lax pydantic reads `true` as 1; a quoted "2" stays accepted, as before
        if isinstance(value, bool):
            raise ValueError(f"must be a whole number, got {str(value).lower()}")
        return value

    @field_validator("owner", "reason")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zone(value)
        except PartitionError as exc:
            raise ValueError(str(exc)) from exc
        return value

    @model_validator(mode="after")
    def _range_fits_grain(self) -> "BackfillRequest":
        if self.publish_mode is not PublishMode.REPLACE and self.strategy is not Strategy.RECOMPUTE:
            raise ValueError(f"publish_mode: {self.publish_mode.value} applies to strategy recompute only "
                             f"(got strategy {self.strategy.value})")
        if self.target.where is not None and self.strategy.whole_table:
            raise ValueError(f"target.where: a {self.strategy.value} re-creates the whole table; where applies to "
                             "recompute and patch")
        self._check_past()
        if self.schema_changes == "allow" and not self.strategy.whole_table:
            raise ValueError(f"schema_changes: applies to strategy rebuild only (got strategy {self.strategy.value}, "
                             "which keeps the target's schema)")
        if self.range is None:
            if not self.strategy.whole_table:  # only a whole-table strategy may cover every partition
                raise ValueError(f"range: required for strategy {self.strategy.value}")
            if self.marts:
                raise ValueError("marts: need a range (a rebuild without one cannot say which mart partitions change)")
            return self
        if self.marts:
            mart_order(self.marts)
        if self.delete_missing and self.strategy is not Strategy.PATCH:
            raise ValueError("delete_missing: applies to strategy patch only")
        try:
            for bound in half_open(self.range.start, self.range.end, self.target.grain, self.time_zone):
                if not isinstance(bound, datetime):  # a lease compares a day's midnight in the zone as an instant
                    datetime.combine(bound, time(), zone(self.time_zone)).astimezone(timezone.utc)
        except PartitionError as exc:
            raise ValueError(f"range: {exc}") from exc
        except (OverflowError, ValueError):  # a bound next to date.min or date.max: its exclusive end is no date
            raise ValueError(f"range: {self.range.start.isoformat()} .. {self.range.end.isoformat()}: a partition bound "
                             f"(the exclusive end included) would fall outside {date.min.isoformat()} .. "
                             f"{date.max.isoformat()}") from None
        return self

    def _check_past(self) -> None:
        """Refuse what ``depends_on_past`` cannot do (raises ``ValueError`` naming the field at fault).

        Only a recompute: a rebuild stages the whole table in one statement, so no partition can read the staged
        one before it; a patch stages some rows of a partition only, so "the previous partition as it will be" would
        be the patched rows without the others. Batches are one partition each, one at a time: a ``batch_size`` or
        ``concurrency`` above 1 is refused rather than silently overridden."""
        if not self.depends_on_past:
            return
        if self.strategy is not Strategy.RECOMPUTE:
            raise ValueError(f"depends_on_past: applies to strategy recompute only (got strategy {self.strategy.value}"
                             "; a rebuild stages the whole table at once and a patch only some rows of a partition)")
        if self.batch_size is not None and self.batch_size > 1:
            raise ValueError(f"batch_size: must be 1 or left out with depends_on_past (got {self.batch_size}): each "
                             "partition is staged before the next one reads it")
        if self.concurrency is not None and self.concurrency > 1:
            raise ValueError(f"concurrency: must be 1 or left out with depends_on_past (got {self.concurrency}): "
                             "partitions are staged in order, one at a time")

    def mart_request(self, mart: Mart) -> "BackfillRequest":
        """The request a mart is recomputed by: the mart's table, SQL, keys and suite; the months (or days) that
        cover this request's range; the same owner, reason, time zone and staging; strategy recompute."""
        first, last = self.range.start, self.range.end
        if self.target.grain is Grain.MONTH and mart.grain is not Grain.MONTH:
            # a month of the target covers every day of it: the range's end is any day of its last month
            last = (last.replace(day=28) + timedelta(days=4)).replace(day=1) - timedelta(days=1)
        if mart.grain is Grain.MONTH:
            first, last = first.replace(day=1), last.replace(day=1)
        return BackfillRequest(
            name=f"{self.name}:{mart.table}", owner=self.owner, reason=self.reason,
            target=Target(table=mart.table, partition_column=mart.partition_column, grain=mart.grain),
            range=DateRange(start=first, end=last), time_zone=self.time_zone, strategy=Strategy.RECOMPUTE,
            source=Source(sql=mart.sql), keys=mart.keys, expectations=mart.expectations,
            batch_size=self.batch_size, concurrency=self.concurrency, on_source_change=self.on_source_change,
            staging=self.staging,
        )

    def bounds(self):
        """The half-open ``[start, end)`` of the request's range at its grain (``None`` for a rebuild without one)."""
        if self.range is None:
            return None
        return half_open(self.range.start, self.range.end, self.target.grain, self.time_zone)


def _shown(value: object, limit: int = 60) -> str:
    """``value`` as an error message may echo it: a string as it is (its repr when it holds a line break or another
    unprintable character, so the message stays one line), anything else its repr, cut to ``limit`` characters."""
    text = value if isinstance(value, str) and value.isprintable() else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(err: dict) -> str:
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "enum":
        msg = f"{msg}, got '{_shown(err['input'])}'"
    field = _field_of(err)
    named = re.match(r"^([\w.]+): (.*)$", msg)
    if named and (not field or err["type"] == "value_error"):  # a whole-model check names its field as a prefix
        name, msg = named.groups()
        field = f"{field}.{name}" if field else name
    return f"field '{field or 'request'}': {msg}"


def _field_of(err: dict) -> str:
    return ".".join(str(p) for p in err["loc"])


def load_request(path: str | Path) -> BackfillRequest:
    """Load and check a request file.

    The request's ``name`` defaults to the file's stem. Files it names (source SQL, expectation suite) must
    exist.

    Raises
    ------
    RequestError
        When the file is missing or not YAML, a field is missing or invalid (the message names the file and
        the field), or a file the request names does not exist.
    """
    path = Path(path)
    if not path.is_file():
        raise RequestError(f"{path}: request file not found")
    try:
        data = load_yaml(read_utf8(path))
    except UnicodeDecodeError as exc:
        raise RequestError(f"{path}: {not_utf8(exc)}") from None
    except yaml.YAMLError as exc:
        raise RequestError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from exc
    if not isinstance(data, dict):
        raise RequestError(f"{path}: expected a mapping of request fields, got {type(data).__name__}")
    data.setdefault("name", path.stem)
    try:
        request = BackfillRequest.model_validate(data)
    except ValidationError as exc:
        # A misspelt key shows as an unknown field plus a missing one: name the unknown (the typo) first.
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        text = "; ".join(_describe(e) for e in errors[:3])  # an echoed value's line break is shown, not broken
        raise RequestError(f"{path}: " + text.replace("\r", "\\r").replace("\n", "\\n")) from exc
    files = [("source.sql", request.source.sql), ("expectations", request.expectations)]
    for i, m in enumerate(request.marts):
        files += [(f"marts.{i}.sql", m.sql), (f"marts.{i}.expectations", m.expectations)]
    for field, file in files:
        if file is not None and not Path(file).is_file():
            raise RequestError(f"{path}: field '{field}': file {file} not found")
    for field, file in files:
        if field.endswith("sql"):  # before Spark starts; Spark's parser checks again (sources.check_query)
            try:
                single_query(read_utf8(Path(file)), f"{file}")
            except UnicodeDecodeError as exc:
                raise RequestError(f"{path}: field '{field}': file {file}: {not_utf8(exc)}") from None
            except ValueError as exc:
                raise RequestError(f"{path}: field '{field}': {exc}") from None
    return request


def read_utf8(path: Path) -> str:
    """The text of ``path`` decoded as UTF-8 (``UnicodeDecodeError`` otherwise)."""
    return path.read_bytes().decode("utf-8")


def not_utf8(exc: UnicodeDecodeError) -> str:
    """What a decoding error says about a file: the first bad byte and its offset."""
    return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"


def same_request(stored: dict, request: BackfillRequest) -> bool:
    """Whether ``stored`` (a request as the ledger's plan JSON holds it) is ``request``: compared as models, so a
    field added since with its default (``publish_mode``, ``on_source_change``) does not make a run's own request
    look like another one."""
    try:
        return BackfillRequest.model_validate(stored) == request
    except ValueError:  # pydantic's ValidationError: a stored field this version no longer knows
        return False
