"""Great Expectations validation of staged rows.

A suite is a GX 1.x JSON file (``{"name": ..., "expectations": [{"type": ..., "kwargs": {...}}]}``) in
``expectations/``. Values that come from the run are suite parameters (``{"$PARAMETER": "range_start"}``)
filled at run time: ``range_start`` and ``range_last`` (first and last partition of the run, inclusive),
``batch_start`` and ``batch_last`` (the same for the batch validated) and ``run_id``.

Validation runs on a Spark dataframe asset of an ephemeral GX context, once over the run's whole range. A
failed expectation names the partitions of its unexpected rows (GX's ``unexpected_index_list`` with the
partition column as index). An expectation that raised inside GX is a failure, never a pass.
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from backfill_lib.adapters.gx_import import great_expectations
from backfill_lib.core.checks import Check
from backfill_lib.core.errors import SuiteError
from backfill_lib.core.partition_keys import PartitionKeys, keys_of


@dataclass(frozen=True)
class LoadedSuite:
    """A GX ``ExpectationSuite`` and the path it came from."""

    path: Path
    suite: Any

    @property
    def name(self) -> str:
        return self.suite.name


def load_suite(path: str | Path) -> LoadedSuite:
    """Load a GX suite from JSON and check that every declared expectation survived loading.

    Raises
    ------
    SuiteError
        When the file is missing or not JSON, GX rejects it, or the loaded suite holds fewer expectations
        than the file declares; the message names the file.
    """
    gx = great_expectations()
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise SuiteError(f"{path}: expectation suite file not found") from exc
    except json.JSONDecodeError as exc:
        raise SuiteError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("expectations"), list):
        raise SuiteError(f"{path}: expected an object with a list 'expectations'")
    declared = len(data["expectations"])
    try:
        suite = gx.ExpectationSuite(**{k: v for k, v in data.items() if k in ("name", "expectations", "meta")})
    except Exception as exc:  # GX raises many types for a bad configuration; all mean the same here
        raise SuiteError(f"{path}: not a valid GX expectation suite: {str(exc).splitlines()[0]}") from exc
    if len(suite.expectations) != declared:
        raise SuiteError(f"{path}: declares {declared} expectations but GX loaded {len(suite.expectations)}")
    return LoadedSuite(path, suite)


#: Builds GX Data Docs, one site at a time, beside publishing (HTML rendering is pure Python: a single thread)
_DOCS = ThreadPoolExecutor(1, thread_name_prefix="gx-data-docs")

#: The first pass: success per expectation only, about a quarter of the Spark jobs of ``COMPLETE`` (GX skips
#: the unexpected counts, values and index lists). Only a suite that fails runs again with ``COMPLETE``.
QUICK = {"result_format": "BOOLEAN_ONLY"}


def _expectation_name(config: Any) -> str:
    kwargs = config.kwargs
    target = kwargs.get("column") or kwargs.get("column_list") or [kwargs.get("column_A"), kwargs.get("column_B")]
    if isinstance(target, list):
        target = ",".join(str(t) for t in target if t)
    return f"{config.type}({target})"


def _raised(result: Any) -> str | None:
    info = result.exception_info or {}
    if info.get("raised_exception"):
        return info.get("exception_message") or "raised an exception"
    for value in info.values():  # GX nests exception info per metric in some paths
        if isinstance(value, dict) and value.get("raised_exception"):
            return value.get("exception_message") or "raised an exception"
    return None


class SuiteRunner:
    """Runs one loaded suite on Spark DataFrames through an ephemeral GX context.

    With ``results_dir``, every validation goes through a GX Checkpoint whose ``UpdateDataDocsAction`` builds
    GX Data Docs (HTML, ``results_dir/data_docs/index.html``), and each result is kept as JSON
    (``results_dir/validation/range.json`` for the run's whole range, ``batch_<n>.json`` for a batch).
    Failing rows are attributed to partitions keyed as the plan keys them (``partition_column`` may be the
    plan's :class:`PartitionKeys`).
    """

    def __init__(self, loaded: LoadedSuite, partition_column: str | PartitionKeys, results_dir: Path | None = None):
        import logging

        gx = great_expectations()
        for name in ("great_expectations", "great_expectations.data_context.types.base"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self.loaded = loaded
        self.partition_keys = keys_of(partition_column)
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context = gx.get_context(mode="ephemeral")
        # GX draws a tqdm bar per validation on stderr; the run reports its own progress.
        context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        # GX would persist each batch's DataFrame (and never unpersist it): a second in-memory copy of rows the
        # Validate stage already holds (pinned, or cached for the audits), built on the first expectation's job.
        asset = context.data_sources.add_spark("backfill", persist=False).add_dataframe_asset("staged")
        self.batch_definition = asset.add_batch_definition_whole_dataframe("batch")
        self.results_dir = results_dir
        self.result_format = {"result_format": "COMPLETE", "unexpected_index_column_names": list(self.partition_keys.columns)}
        self.checkpoint = self.quick_checkpoint = None
        self._docs_action = None
        self._docs: Future | None = None
        if results_dir is not None:
            from great_expectations.checkpoint import UpdateDataDocsAction

            context.add_data_docs_site(
                site_name="run",
                site_config={
                    "class_name": "SiteBuilder",
                    "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
                    "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                                      "base_directory": str(results_dir / "data_docs")},
                },
            )
            suite = context.suites.add(gx.ExpectationSuite(name=loaded.suite.name,
                                                           expectations=loaded.suite.expectations))
            definition = context.validation_definitions.add(
                gx.ValidationDefinition(name="staged", data=self.batch_definition, suite=suite)
            )
            # The checkpoints store each result; their Data Docs are built afterwards, off the gate's path
            # (:meth:`validate`), with the action a checkpoint would run.
            self.checkpoint, self.quick_checkpoint = (
                context.checkpoints.add(
                    gx.Checkpoint(name=name, validation_definitions=[definition], actions=[],
                                  result_format=result_format)
                )
                for name, result_format in (("backfill", self.result_format), ("backfill_quick", QUICK))
            )
            self._docs_action = UpdateDataDocsAction(name="data_docs", site_names=["run"])
            self._docs_action._data_context = context  # as Checkpoint.run sets it: this context, not GX's current one

    def _run(self, df: DataFrame, parameters: dict[str, Any], quick: bool) -> tuple[Any, Any]:
        """One GX validation of ``df``: its suite result, and the checkpoint's result when there is a checkpoint
        (``None`` otherwise)."""
        if self.checkpoint is not None:
            checkpoint = self.quick_checkpoint if quick else self.checkpoint
            run = checkpoint.run(batch_parameters={"dataframe": df}, expectation_parameters=parameters)
            return next(iter(run.run_results.values())), run
        gx_batch = self.batch_definition.get_batch(batch_parameters={"dataframe": df})
        return gx_batch.validate(self.loaded.suite, expectation_parameters=parameters,
                                 result_format=QUICK if quick else self.result_format), None

    def docs_built(self) -> None:
        """Wait until the GX Data Docs of the last validation are written (``results_dir/data_docs``); return at
        once when none are being built. Raises what building them raised (GX's own exceptions); a build that a
        later validation replaced is waited for by that validation, and its error is not raised."""
        docs, self._docs = self._docs, None
        if docs is not None:
            docs.result()

    def validate(self, df: DataFrame, parameters: dict[str, Any], batch: int | None = None) -> list[Check]:
        """Validate ``df``; return one :class:`Check` per expectation and failing partition.

        A suite is validated first with GX's ``BOOLEAN_ONLY`` result format; only when an expectation fails or
        raises is it validated again with ``COMPLETE`` (unexpected rows and their partitions). With a
        ``results_dir``, the result's Data Docs are built in a background thread: :meth:`docs_built` waits for them.

        ``batch`` is ``None`` when ``df`` is the run's whole range. A passing expectation gives one passing
        check; a failing one gives a check per partition
        holding unexpected rows (``observed`` is that partition's count of unexpected rows), or one batch-level
        check when GX cannot point at rows (for example a missing column, which GX reports as an exception).
        """
        if self._docs is not None:  # one GX call at a time on the context; what the build raised is said later
            wait([self._docs])
        result, run = self._run(df, parameters, quick=True)
        if not all(r.success and not _raised(r) for r in result.results):
            result, run = self._run(df, parameters, quick=False)  # again, for the rows and partitions at fault
        if run is not None:
            self._docs = _DOCS.submit(self._docs_action.run, checkpoint_result=run)
        if self.results_dir is not None:
            out = self.results_dir / "validation" / ("range.json" if batch is None else f"batch_{batch}.json")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(result.describe())
        checks: list[Check] = []
        for r in result.results:
            name = _expectation_name(r.expectation_config)
            raised = _raised(r)
            if r.success and not raised:
                checks.append(Check("expectation", name, True, batch=batch))
                continue
            index = (r.result or {}).get("unexpected_index_list") or []
            per_partition = Counter(self.partition_keys.key_of_row(row) or "NULL"
                                    for row in index if isinstance(row, dict))
            if raised or not per_partition:
                observed = (r.result or {}).get("observed_value", (r.result or {}).get("unexpected_count"))
                message = f"GX raised: {raised.splitlines()[0]}" if raised else None
                checks.append(Check("expectation", name, False, batch=batch, observed=str(observed), message=message))
                continue
            for partition, count in sorted(per_partition.items()):
                checks.append(
                    Check(
                        "expectation",
                        name,
                        False,
                        partition=partition,
                        batch=batch,
                        observed=f"{count} unexpected",
                        expected="0 unexpected",
                        message=f"{count} unexpected rows",
                    )
                )
        return checks


def suite_parameters(plan, batch) -> dict[str, object]:
    """The evaluation parameters a suite may reference (``{"$PARAMETER": "range_start"}``): the run ID and the
    first partition start of the range and of ``batch`` (dates or UTC-aware datetimes, inclusive; for a string
    partition column with ``partition_format``, its keys: strings in the column's format; for a ``TIMESTAMP``
    data column of a day or month grain, the UTC instants those days start at in the request's time zone)."""
    from backfill_lib.core.file_ranges import instant_bounds

    parts = plan.partitions
    instants = plan.range_in_data and plan.range_type == "timestamp"

    def value(p):
        if instants:
            return instant_bounds(p.partition, plan.request.target.grain, plan.request.time_zone)[0]
        return p.key if plan.partition_format is not None else p.partition.start

    return {
        "run_id": plan.run_id,
        "range_start": value(parts[0]),
        "range_last": value(parts[-1]),
        "batch_start": value(batch.partitions[0]),
        "batch_last": value(batch.partitions[-1]),
    }
