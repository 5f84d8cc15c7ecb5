"""The ledger: run, partition and check records in Delta tables beside the data.

Every table is append-only: a state change is a new event row, and the latest event (by ``seq``, nanoseconds
since the epoch when the event was recorded, strictly increasing within a process) wins. Blind appends never
conflict with each other in Delta, so parallel batches and resumed runs can record freely, and writing the same
event twice changes no state.

Events are written behind the run, in bursts, and every read flushes first.

- :mod:`~backfill_lib.ledger.schema`: the tables (described there), how values are written, a run's first
  record (:func:`run_record`).
- :mod:`~backfill_lib.ledger.writer`: the write-behind (what a crash can lose and why that is safe).
- :mod:`~backfill_lib.ledger.store`: :class:`Ledger`, what the run, the CLI and the reports use.
"""

from backfill_lib.ledger.schema import (
    CHECKS_SCHEMA,
    DIFFS_SCHEMA,
    JSON_TIMESTAMP_FORMAT,
    PARTITIONS_SCHEMA,
    RUNS_SCHEMA,
    SCHEMAS,
    RunRecord,
    json_value,
    run_record,
)
from backfill_lib.ledger.store import Ledger
from backfill_lib.ledger.writer import LINGER_SECONDS, EventWriter

__all__ = [
    "CHECKS_SCHEMA",
    "DIFFS_SCHEMA",
    "JSON_TIMESTAMP_FORMAT",
    "LINGER_SECONDS",
    "PARTITIONS_SCHEMA",
    "RUNS_SCHEMA",
    "SCHEMAS",
    "RunRecord",
    "EventWriter",
    "Ledger",
    "json_value",
    "run_record",
]
