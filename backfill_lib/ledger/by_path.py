"""A ledger table appended to and read through its files with delta-rs (the ``deltalake`` package): no Spark job.

Where a ledger table lives on this machine's file system (the embedded default; a local warehouse several processes
share), one append of a burst of events is a Parquet file and a commit written by delta-rs in milliseconds, where
Spark's append of the same rows is a job, a commit and, every tenth commit, a checkpoint, on the run's path. Reads
that stand before every run (its lease check, whether a run ID exists, the abandon check) read the files the same
way. Both engines write the same Delta protocol to the same log: Spark reads these commits (their
``userMetadata`` too), and writers of either engine are ordered by the log's atomic commit files, as two Spark
writers are. Every other read of the ledger (reports, partitions, checks) goes through Spark as before.

:class:`LedgerTable` is one table's folder; :meth:`~backfill_lib.ledger.store.Ledger.ensure` makes one per table
when the table is local and ``deltalake`` is installed (the ``local`` extra), else the ledger writes through Spark.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from datetime import datetime, timezone

from backfill_lib.core.errors import BackfillError

log = logging.getLogger(__name__)

#: a checkpoint after every this many commits, as Spark writes them (``delta.checkpointInterval``'s default), so a
#: reader of either engine replays at most this many commit files
CHECKPOINT_EVERY = 10
#: the small files of this many commits are compacted into one, in the background (Spark's auto compaction of
#: the ledger tables does the same after its own commits)
COMPACT_EVERY = 50


def available() -> bool:
    """Whether delta-rs is installed (the ``local`` extra)."""
    return importlib.util.find_spec("deltalake") is not None


def _utc(value):
    """A timestamp as delta-rs stores it (aware, UTC); a naive one is taken as UTC, as
    :func:`~backfill_lib.ledger.schema.json_value` writes it for Spark's append. Anything else as it is."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return value


def _local(value):
    """A timestamp of delta-rs (aware, UTC) as pyspark returns it (naive, this process's local time)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone().replace(tzinfo=None)
    return value


class LedgerTable:
    """The ledger table in folder ``path`` (a Delta table on the local file system), through delta-rs."""

    def __init__(self, path: str, name: str):
        self.path = path
        self.name = name
        self._compacting = threading.Lock()

    def append(self, rows: list[dict], user_metadata: str) -> int:
        """Append ``rows`` (column: Python value; a column the table has and a row lacks is NULL) in one commit
        whose ``userMetadata`` is ``user_metadata``; return the table's version after it. A value of the wrong type
        for its column, or a table gone or unreadable, raises a :class:`BackfillError` naming the table and commits
        nothing. Every :data:`CHECKPOINT_EVERY` versions a
        checkpoint follows; every :data:`COMPACT_EVERY` a compaction starts in the background."""
        import pyarrow as pa
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        try:
            table = DeltaTable(self.path)
            schema = pa.schema(table.schema().to_arrow())
            data = pa.Table.from_pylist([{f.name: _utc(r.get(f.name)) for f in schema} for r in rows], schema=schema)
            write_deltalake(table, data, mode="append",
                            commit_properties=CommitProperties(custom_metadata={"userMetadata": user_metadata}))
        except Exception as exc:  # delta-rs and arrow raise their own types
            raise BackfillError(f"ledger table {self.name} ({self.path}): events not written: "
                                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        table.update_incremental()
        version = table.version()
        if version % CHECKPOINT_EVERY == 0:
            table.create_checkpoint()
        if version % COMPACT_EVERY == 0:
            # not a daemon: exit waits for it rather than stopping delta-rs mid-commit (a native abort)
            threading.Thread(target=self._compact, name=f"ledger-compact-{version}").start()
        return version

    def _compact(self) -> None:
        """Rewrite the table's small files into one (no data change); a failure is logged, never raised: the
        events stay readable either way, only slower."""
        if not self._compacting.acquire(blocking=False):
            return
        try:
            from deltalake import DeltaTable

            DeltaTable(self.path).optimize.compact()
        except Exception:
            log.warning("ledger table %s: compaction failed", self.path, exc_info=True)
        finally:
            self._compacting.release()

    def metadata(self) -> tuple[dict[str, str], list[str]]:
        """The table's properties and column names, from its log; ``ValueError`` for a table whose files do not hold
        its rows as they are (:func:`_plain`)."""
        from deltalake import DeltaTable

        table = DeltaTable(self.path)
        _plain(table)
        return dict(table.metadata().configuration), [f.name for f in table.schema().fields]

    def version(self) -> int:
        """The table's latest version."""
        from deltalake import DeltaTable

        return DeltaTable(self.path).version()

    def user_metadata_since(self, version: int) -> list[tuple[int, str | None]]:
        """``(version, userMetadata)`` of every commit from ``version`` (inclusive) on, newest first."""
        from deltalake import DeltaTable

        table = DeltaTable(self.path)
        newest = table.version() - version + 1
        if newest <= 0:
            return []
        return [(int(c["version"]), c.get("userMetadata")) for c in table.history(newest)
                if int(c["version"]) >= version]

    def rows(self, columns: list[str] | None = None, where=None) -> list[dict]:
        """:func:`table_rows` of this table."""
        return table_rows(self.path, columns, where)


def _plain(table) -> None:
    """Raise ``ValueError`` unless delta-rs table ``table``'s files hold its rows as they are: no partition
    columns, no column mapping, no deletion vectors (the ledger's tables have none; one that does is read and
    written through Spark)."""
    protocol, metadata = table.protocol(), table.metadata()
    features = set(protocol.reader_features or ())
    mapping = metadata.configuration.get("delta.columnMapping.mode", "none")
    if metadata.partition_columns or mapping != "none" or "deletionVectors" in features:
        raise ValueError(f"partition columns {metadata.partition_columns}, column mapping {mapping}, reader "
                         f"features {sorted(features)}: read through Spark")


def table_rows(path: str, columns: list[str] | None = None, where=None) -> list[dict]:
    """The rows of the Delta table in folder ``path`` as dicts of ``columns`` (all when ``None``; ones the table
    lacks are left out), those ``where`` (a ``pyarrow.compute`` expression) holds for; timestamps as pyspark
    returns them (naive, this process's local time).

    delta-rs gives the live files and the schema; pyarrow reads the Parquet files itself. Reading through
    delta-rs's own arrow dataset left a native thread running at exit, which aborted one process in three
    ("terminate called without an active exception"). Raises ``ValueError`` for a table whose files do not hold
    its rows as they are (:func:`_plain`), delta-rs's and arrow's errors for one they cannot read."""
    from urllib.parse import unquote, urlparse

    import pyarrow as pa
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    table = DeltaTable(path)
    _plain(table)
    schema = pa.schema(table.schema().to_arrow())
    wanted = None if columns is None else [c for c in columns if c in schema.names]
    files = [unquote(urlparse(uri).path) for uri in table.file_uris()]
    dataset = ds.dataset(files, format="parquet", schema=schema) if files else ds.dataset(schema.empty_table())
    found = dataset.to_table(columns=wanted, filter=where)
    return [{k: _local(v) for k, v in row.items()} for row in found.to_pylist()]
