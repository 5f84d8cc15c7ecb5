"""delta-backfill: safe, resumable, validated backfills of Delta Lake tables on Spark.

The public surface, kept at these paths: ``backfill_lib.cli`` (``app``, ``main(argv) -> int``),
:func:`get_spark`, :func:`load_settings`, :func:`load_request`, :func:`plan_backfill` and :func:`run_backfill`.
They are exported lazily, so ``import backfill_lib`` (and the pure planning modules) need no pyspark.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "get_spark": "backfill_lib.adapters.session",
    "load_settings": "backfill_lib.core.settings",
    "load_request": "backfill_lib.intake.request",
    "plan_backfill": "backfill_lib.api",
    "run_backfill": "backfill_lib.api",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'backfill_lib' has no attribute {name!r}")
