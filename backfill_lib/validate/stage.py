"""The Validate stage: every audit of the staged rows at once, and the gate that blocks publishing.

Write-audit-publish: the staged rows of the whole range are read once (cached) and audited together: one GX
validation, one aggregation per reconciliation or metric rule (against its source side, read while staging
runs), one diff by key, one ``groupBy`` of the keys, one aggregation of the target's constraints, and the
per-partition checksums the post-publish check reuses. Every check still names its partition or keys.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import TypeVar

from pyspark import StorageLevel
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_lib.adapters.delta_log import live_constraints, live_generated_columns
from backfill_lib.adapters.pool import in_pool
from backfill_lib.core.checks import Check
from backfill_lib.core.errors import GateFailedError, KeysOutsideRangeError, RequestError, first_line
from backfill_lib.core.partitions import key_order, quote_ident, range_predicate
from backfill_lib.core.progress import Reporter
from backfill_lib.core.settings import Settings
from backfill_lib.plan.model import BackfillPlan, Batch, Implementation
from backfill_lib.validate.fingerprints import fingerprint_aggregates, fingerprints_of
from backfill_lib.plan.source_pins import read_table
from backfill_lib.ledger import Ledger
from backfill_lib.run.stage import Staged
from backfill_lib.run.staging import pinned, staged_rows
from backfill_lib.validate.constraints import applicable, constraint_checks
from backfill_lib.validate.diff import BROADCAST_KEYS, diff_by_key
from backfill_lib.validate.diff import evaluate as evaluate_diff
from backfill_lib.validate.diff import target_duplicate_checks
from backfill_lib.validate.gates import row_count_checks
from backfill_lib.validate.key_audit import keys_outside, named_key, unique_key_checks
from backfill_lib.validate.metrics import compare as compare_metrics
from backfill_lib.validate.metrics import profile, profile_aggregates, profile_of
from backfill_lib.validate.reconcile import reconcile_batch, source_metric
from backfill_lib.validate.shared_pass import SharedPass
from backfill_lib.validate.suites import LoadedSuite, SuiteRunner, suite_parameters

T = TypeVar("T")

#: The source sides of a run's rules, by kind (``reconciliation``, ``metric_rules``), in request order.
SourceSides = dict[str, list[Future]]


@dataclass(frozen=True)
class Validated:
    """What validation found: every check (row-count gates first), the diffs by partition, and for strategies
    that replace partitions the staged rows' ``(rows, checksum)`` per partition key (``None`` otherwise)."""

    checks: tuple[Check, ...]
    diffs: tuple = ()
    fingerprints: dict | None = None
    #: staged keys the target also holds outside the range: raised by :meth:`Validate.gate` once no check failed
    outside: KeysOutsideRangeError | None = None

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.success)


def validation_scope(plan: BackfillPlan) -> tuple[Batch, bool]:
    """What validation covers: every planned partition as one unit, and whether whole tables are compared (a
    rebuild) rather than the range."""
    return Batch(0, plan.partitions), plan.strategy.whole_table


class Validate:
    """Validates staged runs on one session, recording diffs in ``ledger``; GX results go under the settings'
    ``runs_dir``; ``implementation`` gives a plan's strategy (what it replaces, which rows its diff compares)."""

    def __init__(self, spark: SparkSession, settings: Settings, ledger: Ledger, implementation: Implementation):
        self.spark = spark
        self.settings = settings
        self.ledger = ledger
        self.implementation = implementation
        self._suites: dict[str, SuiteRunner] = {}  # by run ID: the suite runner whose Data Docs may be building

    def docs_built(self, run_id: str) -> None:
        """Wait until run ``run_id``'s GX Data Docs are written; return at once if none are being built. Raises
        what building them raised."""
        runner = self._suites.pop(run_id, None)
        if runner is not None:
            runner.docs_built()

    @contextlib.contextmanager
    def source_reads(self, plan: BackfillPlan) -> Iterator[SourceSides]:
        """:meth:`read_sources` in a pool of the block's lifetime, started as the block starts (while staging
        runs). When the strategy stages in the write time zone and that is not the run's, they are read first:
        staging in that zone is seen by every thread of the session."""
        rules = len(plan.request.reconciliation) + len(plan.request.metric_rules)
        with ThreadPoolExecutor(rules + 1, thread_name_prefix=f"{plan.run_id}-source") as pool:
            sources = self.read_sources(plan, pool)
            if self.implementation(plan).stages_in_write_zone and plan.write_time_zone != plan.session_time_zone:
                wait([f for side in sources.values() for f in side])
            yield sources

    def record_unchanged(self, staged: Staged, record: dict, reporter: Reporter) -> dict:
        """Record a run whose staged rows equal the target's (:func:`nothing_changes`) ``unchanged``, every
        partition too, and say so; return the run's new record."""
        plan = staged.plan
        self.ledger.record_partitions(plan.run_id, [{"partition": p.key, "status": "unchanged",
                                                     "rows": staged.rows.get(p.key)} for p in plan.partitions])
        reporter.stage(f"staged rows equal {plan.target_table}'s in every partition: nothing to publish")
        return self.ledger.record_run(record, "unchanged", message="staged rows equal the target's; no commit")

    def read_sources(self, plan: BackfillPlan, pool: ThreadPoolExecutor) -> SourceSides:
        """Start reading the source side of every reconciliation rule and metric rule over the whole range, and
        the target's files at the planned version (``target``: :meth:`_target_rows`, what the diff compares).

        They read only the sources and the target, never staging, so they run in ``pool`` while the batches stage
        instead of lengthening validation (staging takes a little longer, since both share the cores)."""
        scope, whole = validation_scope(plan)
        at = f"{plan.request_path}: field"
        return {
            "target": [pool.submit(in_pool, self.spark, self._target_rows, plan)],
            "reconciliation": [
                pool.submit(in_pool, self.spark, on_source_rows,
                            f"{at} 'reconciliation.{i}.source.metric': '{rule.source.metric}' of {rule.source.table}",
                            source_metric, self.spark, plan, scope, rule, whole)
                for i, rule in enumerate(plan.request.reconciliation)],
            "metric_rules": [
                pool.submit(in_pool, self.spark, on_source_rows,
                            f"{at} 'metric_rules.{i}' ({rule.name}) of {rule.source.table}",
                            self._metric_source, plan, scope, rule, whole)
                for i, rule in enumerate(plan.request.metric_rules)],
        }

    def validate(self, staged: Staged, suite: LoadedSuite | None, reporter: Reporter,
                 sources: SourceSides) -> Validated:
        """Audit ``staged`` (the staged rows of the whole range at once) and return every check.

        Once over the range rather than per batch, because each validation costs a fixed few seconds (GX's
        checkpoint, one Spark job per rule) that batches would multiply."""
        plan = staged.plan
        runner = SuiteRunner(suite, plan.partition_keys, self.settings.runs_dir / plan.run_id) if suite else None
        if runner is not None:
            self._suites[plan.run_id] = runner
        scope, whole = validation_scope(plan)
        rows = staged_rows(self.spark, plan.staging_table)
        if not whole:
            rows = rows.where(plan.predicate())
        # Every audit reads the staged rows: one scan of the staging table's files, cached, serves them all.
        # Pinned rows are already held in the session: a second copy would only cost a pass over them.
        cached = not pinned(plan.staging_table)
        if cached:
            rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            checks, diffs, fingerprints, outside = self._audit(plan, runner, scope, whole, rows, reporter, sources,
                                                                sum(staged.rows.values()), fill_cache=cached)
        finally:
            if cached:
                rows.unpersist()
        impl = self.implementation(plan)
        if impl.replaces_partitions:
            checks += target_duplicate_checks(diffs, staged.rows, replaces=impl.removes_repeated_keys)
        return Validated(tuple(self._gate_row_counts(plan, staged.rows) + checks), tuple(diffs), fingerprints,
                         outside)

    def _audit(self, plan: BackfillPlan, runner: SuiteRunner | None, scope: Batch, whole: bool, staged: DataFrame,
               reporter: Reporter, sources: SourceSides, staged_count: int,
               fill_cache: bool = True) -> tuple[list[Check], list, dict | None]:
        # Independent read-only audits all run at once (the FAIR pool shares the cluster between them): on small
        # ranges each is mostly fixed Spark latency, which overlaps; one waiting for a thread would only add its own.
        # + 4: diff (and keys outside the range), checksums, keys, constraints
        audit_count = bool(runner) + len(plan.request.reconciliation) + len(plan.request.metric_rules) + 4
        replaces = self.implementation(plan).replaces_partitions
        # Every per-partition aggregate of the staged rows (checksums, the rules' staged metrics) in one Spark
        # job: registered here, before any audit thread reads them back (the first to read runs the job).
        shared = SharedPass(staged, plan.partition_keys)
        at = f"{plan.request_path}: field"
        reconciled = [shared.add([F.expr(rule.metric)], ["m"],
                                 f"{at} 'reconciliation.{i}.metric': '{rule.metric}' of {plan.target_table}")
                      for i, rule in enumerate(plan.request.reconciliation)]
        profiled = [shared.add(*profile_aggregates(staged, plan.partition_keys, rule.metrics, at=plan.staging_table),
                               label=f"{at} 'metric_rules.{i}' ({rule.name}) of {plan.target_table}")
                    for i, rule in enumerate(plan.request.metric_rules)]
        fingerprinted = shared.add(*fingerprint_aggregates(staged)) if replaces else None
        # From a staging table, run first and alone: it is the one read of the table's files and fills the cache
        # every other audit then reads (audits started together each read the files for the blocks they reached
        # first). Pinned rows are already held: it runs beside the others, when its first reader needs it.
        if fill_cache:
            shared.run()
        with ThreadPoolExecutor(audit_count, thread_name_prefix=f"{plan.run_id}-audit") as pool:
            def submit(fn, *args):
                return pool.submit(in_pool, self.spark, fn, *args)

            # The diff is the longest audit: started first, its plan is built before the others' Python (GX's
            # above all) holds the interpreter.
            diffed = submit(self._diff, plan, staged, whole, sources["target"][0], staged_count)

            def staged_metric(handle: int) -> dict:
                return plan.partition_keys.rekey({r["p"]: r["m"] for r in shared.rows(handle)})

            audits = []
            if runner:
                audits.append(submit(runner.validate, staged, suite_parameters(plan, scope)))
            for rule, source, handle in zip(plan.request.reconciliation, sources["reconciliation"], reconciled):
                audits.append(submit(lambda r, f, h: reconcile_batch(self.spark, plan, scope, r, whole, f.result(), staged,
                                                                     staged_metric=staged_metric(h)),
                                     rule, source, handle))
            for rule, source, handle in zip(plan.request.metric_rules, sources["metric_rules"], profiled):
                audits.append(submit(self._metric_rule, plan, scope, rule, staged, whole, source,
                                     lambda r=rule, h=handle: profile_of(shared.rows(h), plan.partition_keys,
                                                                         r.metrics)))
            audits.append(submit(unique_key_checks, staged, plan.request.keys, plan.staging_table))
            audits.append(submit(self._constraints, plan, staged))
            summed = (submit(lambda: fingerprints_of(shared.rows(fingerprinted), plan.partition_keys))
                      if fingerprinted is not None else None)
            checks: list[Check] = [c for a in audits for c in a.result()]
            diffs, outside = diffed.result()
            fingerprints = summed.result() if summed else None
        if plan.request.diff_gate is not None:
            checks += evaluate_diff(diffs, plan.request.diff_gate)
        batch_of = {k: b.index for b in plan.batches for k in b.keys}
        checks = [replace(c, batch=batch_of.get(c.partition)) for c in checks]
        self.ledger.record_diffs(plan.run_id, diffs.values())
        passed = sum(c.success for c in checks)
        reporter.stage(f"validated: {passed} of {len(checks)} checks passed")
        return checks, list(diffs.values()), fingerprints, outside

    def _gate_row_counts(self, plan: BackfillPlan, rows: dict[str, int]) -> list[Check]:
        if not self.implementation(plan).replaces_partitions:
            return []
        current = {p.key: p.current.rows for p in plan.partitions}
        return row_count_checks(current, rows, plan.request.gates)

    def _target_rows(self, plan: BackfillPlan) -> DataFrame:
        """The target's rows at the planned version (time travel): the diff and the keys-outside lookup read this
        one frame, whose version's file list is built here once (listing the files of the range the diff reads),
        while staging runs, instead of on the diff's path."""
        rows = self.spark.read.option("versionAsOf", plan.target_version).table(plan.target_table)
        (rows if validation_scope(plan)[1] else rows.where(plan.predicate())).inputFiles()
        return rows

    def _metric_source(self, plan: BackfillPlan, scope: Batch, rule, whole: bool) -> dict:
        """A metric rule's metrics of its source per partition over ``scope`` (the whole source when ``whole``);
        reads only the source, like :func:`~backfill_lib.validate.reconcile.source_metric`."""
        source = read_table(self.spark, plan, rule.source.table)  # at the version the run pinned
        if not whole:
            source = source.where(range_predicate(rule.source.partition_column, scope.start, scope.end))
        keys = plan.partition_keys.of_source(rule.source.partition_column)
        return profile(source, keys, rule.metrics, at=rule.source.table)

    def _constraints(self, plan: BackfillPlan, staged: DataFrame) -> list[Check]:
        """The target's CHECK and NOT NULL constraints and generated columns (as the target holds them now: those
        its publishing commit will meet) that apply to ``plan``'s strategy, evaluated on the staged rows."""
        constraints = live_constraints(self.spark, plan.target_table)
        # A rebuild's CREATE OR REPLACE takes its schema (no generation expressions) from the staged rows.
        generated = () if plan.strategy.whole_table else live_generated_columns(self.spark, plan.target_table)
        return constraint_checks(staged, applicable(constraints, plan.strategy, plan.request.keys),
                                 plan.partition_keys, plan.staging_table, generated)

    def _keys_outside(self, plan: BackfillPlan, target: DataFrame, inserted: DataFrame | list[tuple],
                      count: int) -> KeysOutsideRangeError | None:
        """The refusal of a run whose inserted key (``inserted``: the diff's keys staged where the target did not
        hold them, as a DataFrame or as Python values, ``count`` rows) lives in ``target`` (the target at the
        planned version) outside the range, within the slice ``target.where`` selects when the request has one
        (publishing writes only the range, so the table would hold that key twice), or ``None``: a :class:`KeysOutsideRangeError` naming up to
        :data:`~backfill_lib.validate.key_audit.LISTED_OUTSIDE` keys (``order_id=77``) and the partitions outside
        the range where each lives, and how many keys in all.

        Only inserted keys are looked for: a key the target already held at the same partition inside the range
        is rewritten in place, so the run adds no row for it anywhere (a target that already held it outside too
        held it twice before the run). A recompute that changes no key reads nothing here.
        """
        keys = plan.request.keys
        if plan.where is not None:  # target.where selects the slice the request backfills; keys hold within it
            target = target.where(F.coalesce(F.expr(f"({plan.where.sql})"), F.lit(False)))
        listed, total = keys_outside(inserted, target, keys, plan.partition_predicate(), plan.partition_keys,
                                     few=count <= BROADCAST_KEYS)
        if not total:
            return None
        named = "; ".join(
            f"{named_key(keys, key)} in partition{'s' if len(parts) > 1 else ''} "
            f"{', '.join('NULL' if p is None else p for p in parts)}" for key, parts in listed)
        more = f"; and {total - len(listed)} more" if total > len(listed) else ""
        where = "" if plan.where is None else f" (within target.where: {plan.where.text})"
        return KeysOutsideRangeError(
            f"{plan.target_table}: {total} staged key{'s' if total > 1 else ''} ({', '.join(keys)}) "
            f"{'live' if total > 1 else 'lives'} in the target outside the run's range [{plan.range_start}, "
            f"{plan.range_end}){where} too: {named}{more}; publishing writes only the range and would leave a "
            "second row for each, so nothing was published (widen the range to those partitions, or remove the "
            "old rows first)")

    def _metric_rule(self, plan: BackfillPlan, batch: Batch, rule, staged: DataFrame, whole: bool,
                     source: Future, staged_profile=None) -> list[Check]:
        """``rule``'s metrics of the staged rows against its source side (``source``, from :meth:`read_sources`);
        ``staged_profile``, when given, returns the staged side's profile already aggregated (a :class:`SharedPass`)."""
        stg = (profile(staged, plan.partition_keys, rule.metrics, at=plan.staging_table) if staged_profile is None
               else staged_profile())
        src = source.result()
        keys = sorted(set(src) | set(stg), key=key_order) if whole else list(batch.keys)
        return compare_metrics(src, stg, rule.metrics, keys, rule.name, batch.index)

    def _diff(self, plan: BackfillPlan, staged: DataFrame, whole: bool, target: Future,
              staged_count: int) -> tuple[dict, KeysOutsideRangeError | None]:
        """Staged rows against the target's rows as the plan read them (time travel to its version), by key, over
        the range (the whole table when ``whole``), scoped by the strategy (a patch compares the keys it stages);
        and the refusal of :meth:`_keys_outside` for the keys the diff found inserted, or ``None``. ``staged_count``:
        the staged rows; with the plan's count of the range's target rows it bounds the rows the diff reads."""
        everything = target.result()  # the target at the planned version (:meth:`_target_rows`)
        current = everything if whole else everything.where(plan.predicate())
        current = self.implementation(plan).diff_scope(plan, current, staged)
        shared = [c for c in current.columns if c in staged.columns]
        if any(k not in shared for k in plan.request.keys):
            return {}, None  # a rebuild that renamed a key: nothing to compare by key
        corrected = plan.request.diff_gate.allowed_changed_columns if plan.request.diff_gate else ()
        # Keys that hold the partition's value cannot live outside the range: no read for them.
        keyed_by_partition = ({c.lower() for c in plan.partition_keys.columns}
                              <= {k.lower() for k in plan.request.keys})
        found: list[KeysOutsideRangeError | None] = [None]

        def outside(keys: DataFrame | list[tuple], count: int) -> None:
            found[0] = self._keys_outside(plan, everything, keys, count)

        shared = [quote_ident(c) for c in shared]
        before = None if whole else plan.total.rows  # the plan's count from the Delta log, when every file has one
        diffs = diff_by_key(staged.select(*shared), current.select(*shared), plan.request.keys, plan.partition_keys,
                            corrected_columns=corrected, inserted=None if whole or keyed_by_partition else outside,
                            rows_at_most=None if before is None else before + staged_count)
        return diffs, found[0]

    def gate(self, plan: BackfillPlan, record: dict, validated: Validated) -> None:
        """Block publishing when a check failed (record the failed partitions and the run ``failed``), or when a
        staged key lives outside the range.

        Raises
        ------
        GateFailedError
            Naming how many checks failed on how many partitions, and the first; the target is untouched.
        KeysOutsideRangeError
            When every check passed but a staged key lives in the target outside the range (exit 2); the target
            is untouched.
        """
        failures = list(validated.failures)
        if not failures:
            if validated.outside is not None:
                raise validated.outside
            return
        by_partition: dict[str, list[Check]] = {}
        for c in failures:
            by_partition.setdefault(c.partition or ("the range" if c.batch is None else f"batch {c.batch}"), []).append(c)
        keys = {p.key for p in plan.partitions}
        self.ledger.record_partitions(
            plan.run_id,
            [{"partition": k, "status": "failed", "message": "; ".join(c.describe() for c in cs)}
             for k, cs in by_partition.items() if k in keys],
        )
        message = f"{len(failures)} failed checks on {len(by_partition)} partitions; first: {failures[0].describe()}"
        self.ledger.record_run(record, "failed", message=message, resumable=False)
        raise GateFailedError(
            f"validation gate failed for {plan.target_table}, nothing published: {message}", failures=tuple(failures)
        )


def on_source_rows(label: str, read: Callable[..., T], *args) -> T:
    """``read(*args)``, a rule's read of its source side. A failure on the source's data (a cast of a value that is
    not a number, an overflowing sum under ANSI mode) that a second read repeats is the request's: a
    :class:`RequestError` ``"{label} failed on the source rows; nothing was published: {Spark's first line}"``.
    Any other failure (one a second read does not repeat, a cancelled job) is raised as Spark raised it."""
    try:
        return read(*args)
    except PySparkException:
        try:
            return read(*args)
        except PySparkException as exc:
            raise RequestError(f"{label} failed on the source rows; nothing was published: {first_line(exc)}") from None


def nothing_changes(staged: Staged, validated: Validated, implementation: Implementation) -> bool:
    """True when publishing would rewrite rows identical to the target's: every planned partition's diff has no
    insert, delete or update and as many unchanged rows as were staged (more: the target repeats keys), or the
    partition is empty on both sides, and the strategy does not always publish
    (:meth:`~backfill_lib.strategies.base.StrategyImpl.always_publishes`: a rebuild, a run that adds a column)."""
    plan = staged.plan
    if implementation(plan).always_publishes(staged.casts):
        return False
    by_key = {d.partition: d for d in validated.diffs}
    for p in plan.partitions:
        d = by_key.get(p.key)
        if d is None:
            if staged.rows.get(p.key, 0) or p.current.rows:
                return False
        elif d.inserted or d.deleted or d.updated:
            return False
        elif d.unchanged != staged.rows.get(p.key, 0):  # the target repeats keys: the rewrite removes the copies
            return False
    return True
