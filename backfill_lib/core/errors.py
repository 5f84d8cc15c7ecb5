"""The one exception hierarchy of delta-backfill.

Every error a user can cause or meet is a :class:`BackfillError`. Its message is one line naming the file,
field, table, partition or key at fault; the CLI prints it and exits with :attr:`BackfillError.exit_code`.
"""

from __future__ import annotations

#: The longest message line the product prints or records (an echoed input, a Spark plan or a stack never
#: floods a log or the ledger).
MESSAGE_LIMIT = 500


def one_line(text: str, limit: int | None = MESSAGE_LIMIT) -> str:
    """The first non-blank line of ``text``, stripped and cut to ``limit`` characters (ending ``...`` when cut;
    ``None``: not cut); ``""`` when ``text`` is blank."""
    line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
    return line if limit is None or len(line) <= limit else line[: limit - 3] + "..."


def first_line(exc: BaseException) -> str:
    """The first non-blank line of ``exc``'s message (Spark's start with a newline and carry a plan after), or its
    type's name when the message is blank; not cut."""
    return one_line(str(exc), None) or type(exc).__name__


def error_condition(exc: BaseException) -> str:
    """The error condition (class) name of a PySpark exception (``TABLE_OR_VIEW_ALREADY_EXISTS``), or ``""``.

    Also of a JVM error that reaches Python unconverted (a ``Py4JJavaError``, as Delta's commit conflicts, which
    subclass ``ConcurrentModificationException``, do when PySpark's handler is not installed): its Java
    exception's condition, when it is a ``SparkThrowable``."""
    named = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    found = named() if named else None
    java = getattr(exc, "java_exception", None)
    if not found and java is not None:
        try:
            found = java.getCondition()
        except Exception:  # noqa: BLE001 - not a SparkThrowable, or the JVM is gone: no condition
            found = None
    return found or ""


def failure_message(exc: BaseException, limit: int = MESSAGE_LIMIT) -> str:
    """The one-line message recorded for a failed run: a :class:`BackfillError`'s first line, any other error's
    type and first line (``unexpected Py4JJavaError: ...``), at most ``limit`` characters."""
    text = str(exc) if isinstance(exc, BackfillError) else f"unexpected {type(exc).__name__}: {first_line(exc)}"
    return one_line(text, limit)


class BackfillError(Exception):
    """Root of every error delta-backfill raises on purpose. Exit code 1."""

    exit_code = 1


class ConfigError(BackfillError):
    """A settings file is missing, unreadable or invalid. Exit code 2."""

    exit_code = 2


class HomeInUseError(ConfigError):
    """Another process has the local default's home open: its embedded Derby metastore admits one process at a
    time. Exit code 2; nothing was started or written."""


class MetastoreError(ConfigError):
    """The shared metastore of ``metastore_url`` does not answer, its JDBC driver cannot be had, or its tables
    cannot be created (:mod:`backfill_lib.adapters.metastore`). Exit code 2; nothing was started or written."""


class PlatformError(ConfigError):
    """The Python environment or the session has a Spark or Delta release the product does not support, or
    lacks one (:mod:`backfill_lib.core.platform`). Exit code 2."""


class RequestError(BackfillError):
    """A backfill request file is missing, unreadable or has a bad field. Exit code 2."""

    exit_code = 2


class IntakeError(BackfillError):
    """The request does not fit the live table (missing table, column, key, type). Exit code 2."""

    exit_code = 2


class SchemaMismatchError(IntakeError):
    """The source's schema cannot be written into the target without a disallowed change. Exit code 2."""


class PartitionError(BackfillError):
    """A range or grain is malformed, or rows fall outside the planned partitions. Exit code 2."""

    exit_code = 2


class KeysOutsideRangeError(PartitionError):
    """Staged rows carry declared keys the target also holds in rows outside the run's range, where publishing
    (which writes only the range) would leave a second row for each; nothing was published. Exit code 2."""


class SourceError(BackfillError):
    """The source SQL failed to parse, analyse or run. Exit code 1."""


class StrayRowsError(PartitionError):
    """The source produced rows for partitions outside the batch being staged; nothing was written."""


class DuplicateKeyError(BackfillError):
    """The source yields a key more than once; nothing was written. Exit code 3."""

    exit_code = 3


class GateFailedError(BackfillError):
    """A validation, reconciliation or diff gate failed; nothing was published. Exit code 3.

    ``failures`` holds the failed checks (:class:`backfill_lib.core.checks.Check`), one per expectation or rule and
    partition.
    """

    exit_code = 3

    def __init__(self, message: str, failures: tuple = ()):
        super().__init__(message)
        self.failures = failures


class SuiteError(BackfillError):
    """An expectation suite file is missing, unparsable or lost expectations on loading. Exit code 2."""

    exit_code = 2


class FenceError(BackfillError):
    """The target changed inside the backfill's range after the plan saw it; nothing was published. Exit code 4."""

    exit_code = 4


class PublishError(BackfillError):
    """Publishing failed or its post-publish check failed (the target was restored). Exit code 4."""

    exit_code = 4


class SourceChangedError(PublishError):
    """A source the run read at a pinned version changed in the run's range before publishing, and the request
    says ``on_source_change: refuse``; nothing was published. Exit code 4."""


class AbandonedError(PublishError):
    """The run was abandoned (``backfill abandon``) while it ran; found right before its commit, so nothing was
    published and the run stays ``abandoned``. Exit code 4."""


class RolledBackError(PublishError):
    """The post-publish check failed and the target was restored to its pre-publish version. Exit code 4."""


class ConflictError(BackfillError):
    """A Delta commit conflict persisted through every retry; the message names the partitions. Exit code 1."""


class CancelledError(BackfillError):
    """The run was cancelled (SIGINT or SIGTERM) between batches; ``backfill resume RUN_ID`` continues it.
    Exit code 130, as for a shell command ended by Ctrl-C."""

    exit_code = 130


class LeaseError(IntakeError):
    """Another run that is not final holds an overlapping range of the target (:mod:`backfill_lib.core.leases`);
    the message names it, its owner and status, and the ways on. Nothing was staged. Exit code 2."""


class StagingLocationError(BackfillError):
    """A run's staging table could not be created: its location holds files but no Delta table, and no other
    process registered the table there; the message names the folder to remove. Nothing was written. Exit code 2."""

    exit_code = 2


class RunNotFoundError(BackfillError):
    """No run with the given run ID exists in the ledger. Exit code 2."""

    exit_code = 2


def resumable_failure(exc: BaseException) -> bool:
    """Whether a run failed by ``exc`` may pass when resumed unchanged, so it keeps its range's lease
    (:mod:`backfill_lib.core.leases`): an unexpected error (Spark's included), a commit conflict that did not clear
    or a source that failed while running (exit 1). A refusal that would repeat (exit 2 to 4: a gate, stray rows,
    the fence, a bad request) releases it."""
    return not isinstance(exc, BackfillError) or exc.exit_code == 1
