"""Prepare: read what the plan needs from Spark and Delta, then build the frozen plan (the builder is pure).

``backfill plan`` (the dry run) and ``backfill run`` both start here, so the plan printed is the plan executed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import SparkSession

from backfill_lib.adapters.log_reader import log_reader
from backfill_lib.adapters.delta_log import live_table_blockers, missing_table_message, read_table_state, table_exists
from backfill_lib.adapters.generated import with_generated
from backfill_lib.adapters.pool import in_pool
from backfill_lib.adapters.session import case_sensitive, session_time_zone
from backfill_lib.core.errors import IntakeError
from backfill_lib.core.partition_keys import PartitionKeys
from backfill_lib.core.partitions import RowFilter
from backfill_lib.core.settings import Settings
from backfill_lib.core.staging_mode import StagingChoice, staging_mode
from backfill_lib.core.table_names import catalog_table, is_path_table, split_table_name, table_path
from backfill_lib.core.table_state import Column, TableState
from backfill_lib.intake.names import respell_request
from backfill_lib.intake.request import BackfillRequest, load_request
from backfill_lib.intake.rule_checks import check_rules
from backfill_lib.intake.schema_guard import schema_changes
from backfill_lib.intake.table_checks import check_not_own_location, check_not_own_table, check_writable
from backfill_lib.intake.where_check import check_where
from backfill_lib.plan.builder import build_plan
from backfill_lib.plan.kinds import kind_for
from backfill_lib.plan.model import BackfillPlan
from backfill_lib.plan.past_reads import check_past_reads
from backfill_lib.plan.source_pins import pin_sources
from backfill_lib.plan.source_query import source_frame, source_input


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def prepare(
    spark: SparkSession, settings: Settings, request_path: str | Path, run_id: str | None = None
) -> tuple[BackfillPlan, TableState]:
    """Intake and plan: load the request, read the target's state from Delta, build the frozen plan (with
    ``run_id``, or a new one).

    The source SQL is analysed in the request's ``time_zone`` (the session's zone is switched for it and put
    back after), as every later stage runs it (:attr:`BackfillPlan.session_time_zone`).

    Raises
    ------
    IntakeError
        When the Spark session cannot take the request's ``time_zone``, naming both zones, or a ``depends_on_past``
        request's source SQL does not name the target where it can be redirected
        (:func:`~backfill_lib.plan.past_reads.check_past_reads`); nothing is written.
    """
    request = load_request(request_path)
    check_own_tables(spark, settings, request, str(request_path))
    check_path_tables(spark, request, str(request_path))
    request = respell_names(spark, request)
    if request.depends_on_past:  # its reads of the target must be redirectable to the staged partitions
        check_past_reads(spark, request, str(request_path))
    bounds = request.bounds() or (None, None)
    with session_time_zone(spark, request.time_zone, str(request_path)), \
            ThreadPoolExecutor(2, thread_name_prefix="prepare") as pool:  # two independent reads of metadata
        state_read = pool.submit(in_pool, spark, _target_state, spark, request, str(request_path))
        inputs = pool.submit(in_pool, spark, _pinned_input, spark, request, bounds)
        state, where = state_read.result()
        pins, frame, found = inputs.result()
    check_not_own_location("target.table", request.target.table, state.location, _own_locations(spark, settings),
                           str(request_path))
    check_marts_writable(spark, request, str(request_path))
    # in `backfill plan` too: a bad rule never reaches staging; the rules read the rows as staged, with a generated
    # column the source omits computed
    check_rules(spark, request, str(request_path), with_generated(frame, state.generated))
    plan = build_plan(
        request,
        state,
        request_path=str(request_path),
        staging_schema=settings.staging_schema,
        batch_size=settings.batch_size,
        batch_bytes=settings.batch_bytes,
        now=utc_now(),
        source_input=found,
        run_id=run_id,
        where=where,
    )
    changes = ()
    if request.strategy.whole_table:  # a rebuild re-creates the table with the source's schema
        source = tuple(Column(f.name, f.dataType.simpleString(), f.nullable) for f in frame.schema.fields)
        changes = schema_changes(source, state.columns)
    plan = replace(plan, source_versions=pins, schema_changes=changes)
    choice = staging_choice(spark, settings, plan, until=None)  # a run with --until validate chooses again
    return replace(plan, staging_mode=choice.mode, staging_reason=choice.reason), state


def staging_choice(spark: SparkSession, settings: Settings, plan: BackfillPlan, until: str | None) -> StagingChoice:
    """Where ``plan``'s staged rows wait for the publish commit when it runs with ``until`` (``None``, or
    ``validate``): :func:`~backfill_lib.core.staging_mode.staging_mode` of the request's ``staging``, else the
    settings', for the plan's strategy, batches and the session ``spark``."""
    r = plan.request
    return staging_mode(r.staging or settings.staging, until=until,
                        can_pin=kind_for(r.strategy, r.publish_mode).can_pin, reads_staged_batches=r.depends_on_past,
                        session_pins=log_reader(spark).pins_session, batches=len(plan.batches))


def written_tables(request: BackfillRequest) -> list[tuple[str, str]]:
    """``(field, name)`` of every table ``request`` publishes to: the target and its marts."""
    return [("target.table", request.target.table)] + [(f"marts.{i}.table", m.table)
                                                        for i, m in enumerate(request.marts)]


def check_own_tables(spark: SparkSession, settings: Settings, request: BackfillRequest, request_path: str) -> None:
    """Refuse a request that would publish to a table of the settings' ``ledger_schema`` or ``staging_schema`` (a
    forged run event, a staging table swapped under a run), by name or, for a path-based name, by the schemas'
    directories; before anything is read or written.

    Raises
    ------
    IntakeError
        Naming the field, the table, the schema and which settings field names it
        (:func:`~backfill_lib.intake.table_checks.check_not_own_table`).
    """
    schemas = {"ledger_schema": settings.ledger_schema, "staging_schema": settings.staging_schema}
    current = spark.catalog.currentDatabase()
    for field, name in written_tables(request):
        check_not_own_table(field, name, schemas, current, request_path)
    paths = [(field, name) for field, name in written_tables(request) if table_path(name) is not None]
    if paths:
        locations = _own_locations(spark, settings)
        for field, name in paths:
            check_not_own_location(field, name, table_path(name), locations, request_path)


def respell_names(spark: SparkSession, request: BackfillRequest) -> BackfillRequest:
    """``request`` with its column names spelt as their tables spell them and its catalog target named as the catalog
    spells it, when the session resolves names case-insensitively (``spark.sql.caseSensitive`` off, Spark's
    default; :func:`~backfill_lib.intake.names.respell_request`); ``request`` itself when it is case-sensitive.
    A table that cannot be read keeps the names given (the checks that read it then name it)."""
    if case_sensitive(spark):
        return request
    others = {r.source.table for r in request.reconciliation} | {r.source.table for r in request.metric_rules}
    others |= {m.table for m in request.marts}
    tables = {name: columns for name in sorted(others) if (columns := _columns(spark, name)) is not None}
    return respell_request(request, _columns(spark, request.target.table), tables,
                           _catalog_spelling(spark, request.target.table))


def _columns(spark: SparkSession, name: str) -> list[str] | None:
    """The top-level column names of table ``name``, or ``None`` when it cannot be read (missing, no table)."""
    try:
        return list(spark.table(name).columns)
    except Exception:  # AnalysisException and the like: the checks that read the table name it
        return None


def _catalog_spelling(spark: SparkSession, name: str) -> str | None:
    """Catalog table ``name`` spelt part by part as the catalog spells it (``Sales.Orders`` -> ``sales.orders``),
    or ``None`` for a path-based name or one the catalog does not find."""
    parts = split_table_name(name) if table_path(name) is None else None
    if not parts or name == name.lower():  # the session catalog keeps names lower-cased: already its spelling
        return None
    try:  # the catalog's own name of the table; Catalog.getTable echoes the name as given
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
    except Exception:  # no such table: read_table_state names it
        return None
    full = next((r["data_type"] for r in rows if r["col_name"] == "Name"), None)
    spelt = (split_table_name(full) or [])[-len(parts):] if full else []
    if len(spelt) != len(parts) or any(a.lower() != b.lower() for a, b in zip(spelt, parts)):
        return None
    return catalog_table(spelt)


def check_marts_writable(spark: SparkSession, request: BackfillRequest, request_path: str) -> None:
    """Refuse a request whose existing mart has a table property under which Delta would refuse its publishing
    commit (``delta.appendOnly = true``, a writer feature this Delta does not support, ...), at intake rather than
    after the target published. A mart that does not
    exist is left to its own plan.

    Raises
    ------
    IntakeError
        ``"{request_path}: field 'marts.N.table': table NAME has table property delta.appendOnly = true: ..."``.
    """
    for i, mart in enumerate(request.marts):
        if table_exists(spark, mart.table):
            check_writable(f"{request_path}: field 'marts.{i}.table': table {mart.table}", mart.table,
                           live_table_blockers(spark, mart.table))


def _own_locations(spark: SparkSession, settings: Settings) -> dict[str, tuple[str, str]]:
    """``{"ledger_schema": (schema, directory), ...}`` of the product's own schemas that exist."""
    found = {}
    for setting, schema in (("ledger_schema", settings.ledger_schema), ("staging_schema", settings.staging_schema)):
        if spark.catalog.databaseExists(schema):
            found[setting] = (schema, spark.catalog.getDatabase(schema).locationUri or "")
    return found


def path_tables(request: BackfillRequest) -> list[tuple[str, str]]:
    """``(field, name)`` of every path-based table (``delta.`<path>```) ``request`` names in a field: the
    target, marts and the sources of reconciliation and metric rules (a path in the source SQL is read, and
    refused, by Spark's analysis of it)."""
    named = [("target.table", request.target.table)]
    named += [(f"marts.{i}.table", m.table) for i, m in enumerate(request.marts)]
    named += [(f"reconciliation.{i}.source.table", r.source.table) for i, r in enumerate(request.reconciliation)]
    named += [(f"metric_rules.{i}.source.table", r.source.table) for i, r in enumerate(request.metric_rules)]
    return [(field, name) for field, name in named if is_path_table(name)]


def check_path_tables(spark: SparkSession, request: BackfillRequest, request_path: str) -> None:
    """Refuse a path-based table of ``request`` whose path holds no Delta table, before anything is read or
    written (a mart's path would otherwise be found missing only after the target published).

    Raises
    ------
    IntakeError
        ``"{request_path}: field '{field}': table delta.`<path>` is not a Delta table: ..."``, or that its path
        cannot be read.
    """
    for field, name in path_tables(request):
        try:
            found = table_exists(spark, name)
        except IntakeError as exc:
            raise IntakeError(f"{request_path}: field '{field}': {exc}") from None
        if not found:
            raise IntakeError(f"{request_path}: field '{field}': {missing_table_message(name)}")


def _target_state(spark: SparkSession, request: BackfillRequest, request_path: str) -> tuple[TableState, RowFilter | None]:
    """The target's state with per-partition stats of the range's column, and its checked ``target.where``
    (whose files alone the stats then count; checked first against the table's schema and partition spec)."""
    table, column = request.target.table, request.target.partition_column
    if request.target.partition_columns is not None:  # integer date parts: stats keyed by the dates they form
        column = PartitionKeys(column, request.target.grain, request.time_zone, parts=request.target.range_columns)
    where = None
    if request.target.where is not None:
        where = check_where(spark, request, read_table_state(spark, table, with_partitions=False), request_path)
    state = read_table_state(spark, table, partition_column=column, where=where.sql if where else None,
                             bounds=request.bounds())
    return state, where


def _pinned_input(spark: SparkSession, request: BackfillRequest, bounds) -> tuple:
    """Pin the request's Delta sources at their current versions, then analyse the source at those versions over
    ``bounds`` and size its input; returns the pins, the source frame and its input."""
    pins = pin_sources(spark, request)
    frame = source_frame(spark, request, *bounds, versions={s.table: s.version for s in pins})
    return pins, frame, source_input(spark, frame)


def mart_plan(spark: SparkSession, settings: Settings, plan: BackfillPlan, index: int) -> BackfillPlan:
    """The child plan (run ID ``RUN_ID__mN``) that recomputes mart ``index`` (request order) for the partitions
    covering ``plan``'s range, approved as ``plan`` is."""
    mart = plan.request.marts[index]
    request = plan.request.mart_request(mart)
    state = read_table_state(spark, mart.table, partition_column=mart.partition_column)
    child = build_plan(
        request, state, request_path=plan.request_path, staging_schema=settings.staging_schema,
        batch_size=settings.batch_size, batch_bytes=settings.batch_bytes, now=utc_now(),
        run_id=f"{plan.run_id}__m{index}",
        source_input=source_input(spark, source_frame(spark, request, *request.bounds())),
    )
    return replace(child, parent_run_id=plan.run_id, approved_by=plan.approved_by)


class MartPlans:
    """The child plans of runs' marts (:func:`mart_plan`) on one session, each built once: intake checks it before
    staging and the release runs the same plan. Called as ``mart_plans(plan, index)``."""

    def __init__(self, spark: SparkSession, settings: Settings):
        self.spark, self.settings = spark, settings
        self._plans: dict[tuple[str, int], BackfillPlan] = {}

    def __call__(self, plan: BackfillPlan, index: int) -> BackfillPlan:
        key = (plan.run_id, index)
        if key not in self._plans:
            self._plans[key] = mart_plan(self.spark, self.settings, plan, index)
        return self._plans[key]
