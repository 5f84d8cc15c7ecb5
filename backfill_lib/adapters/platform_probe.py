"""Find the PySpark and Delta this Python environment holds, without importing either, and check them
(:mod:`backfill_lib.core.platform`) before the first Spark call."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

from backfill_lib.core.platform import check_python_packages


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _pyspark_version() -> str | None:
    """The version of the PySpark the next ``import pyspark`` takes, read from its ``version.py`` without importing
    it: the one first on the path, which may not be the installed distribution (``spark-submit`` puts
    ``$SPARK_HOME/python`` first on EMR and YARN; Databricks Runtime has no distribution). None: no PySpark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or ():
        version_file = Path(folder) / "version.py"
        if version_file.is_file():
            found = re.search(r"""__version__[^=]*=\s*["']([^"']+)["']""", version_file.read_text())
            if found:
                return found.group(1)
    return _distribution_version("pyspark") or "unknown"


def check_platform() -> None:
    """Raise :class:`backfill_lib.core.errors.PlatformError` when this environment's PySpark or Delta is missing
    or unsupported; see :func:`backfill_lib.core.platform.check_python_packages`."""
    check_python_packages(_pyspark_version(), _distribution_version("delta-spark"),
                          importlib.util.find_spec("delta") is not None, sys.executable)
