"""Which Spark and Delta delta-backfill runs on, checked before its first Spark call. Pure.

The wheel does not depend on PySpark or delta-spark: a cluster (Databricks Runtime, EMR) ships its own, and
installing ours would replace or shadow them. The local default gets both from the ``local`` extra
(``pip install 'delta-backfill[local]'``). So at start the product looks at what it finds and refuses, naming it,
a Spark or Delta it was not built for, instead of failing later on a missing class or a changed API.

Supported: Spark 4.1 (any patch release; verified with 4.1.4), both the Python package and the JVM the session
runs on, and Delta Lake 4 (verified with delta-spark 4.4.0). A platform that ships Delta's Python module without
the ``delta-spark`` distribution (Databricks Runtime) is accepted: its Delta matches its Spark by construction.
"""

from __future__ import annotations

from backfill_lib.core.errors import PlatformError

#: the (major, minor) releases of Spark the product supports
SUPPORTED_SPARK = ((4, 1),)
#: the major releases of Delta Lake the product supports
SUPPORTED_DELTA_MAJOR = (4,)
#: what an install for the embedded local default needs
LOCAL_INSTALL = "pip install 'delta-backfill[local]' (or '.[local,dev]' in a checkout)"


def _release(version: str) -> tuple[int, ...] | None:
    """``(4, 1, 3)`` for ``4.1.3``, ``4.1.0.dev0`` or a vendor's ``4.1.0-amzn-0``; None when it starts otherwise."""
    parts = []
    for piece in version.replace("-", ".").split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts) if len(parts) >= 2 else None


def spark_supported(version: str) -> bool:
    """Whether a Spark version string (``pyspark.__version__`` or ``SparkSession.version``) is supported."""
    release = _release(version)
    return release is not None and release[:2] in SUPPORTED_SPARK


def check_python_packages(pyspark_version: str | None, delta_version: str | None, delta_module: bool,
                          python: str) -> None:
    """Refuse a Python environment whose PySpark or Delta the product does not support.

    ``pyspark_version``: the installed ``pyspark`` distribution's version (None: not installed);
    ``delta_version``: the ``delta-spark`` distribution's (None: not installed); ``delta_module``: whether a
    ``delta`` module is importable at all (a platform may ship it without the distribution); ``python``: the
    interpreter, named in the message.

    Raises
    ------
    PlatformError
        PySpark missing or not 4.1; Delta's Python module missing; a ``delta-spark`` distribution not of
        major release 4. The message names the version found and the interpreter.
    """
    if pyspark_version is None:
        raise PlatformError(f"PySpark is not installed for {python}: the embedded local default needs "
                            f"{LOCAL_INSTALL}; on a cluster, use a runtime with Spark 4.1")
    if not spark_supported(pyspark_version):
        raise PlatformError(f"PySpark {pyspark_version} found for {python}; delta-backfill supports Spark 4.1 "
                            f"(verified with 4.1.4): {LOCAL_INSTALL}, or a runtime with Spark 4.1")
    if not delta_module:
        raise PlatformError(f"Delta Lake's Python module `delta` is not installed for {python}: {LOCAL_INSTALL}; "
                            f"on a cluster, use a runtime with Delta Lake 4")
    release = None if delta_version is None else _release(delta_version)
    if delta_version is not None and (release is None or release[0] not in SUPPORTED_DELTA_MAJOR):
        raise PlatformError(f"delta-spark {delta_version} found for {python}; delta-backfill supports Delta Lake 4 "
                            f"(verified with 4.4.0): {LOCAL_INSTALL}")


def check_session_spark(version: str) -> None:
    """Refuse a session whose Spark (the JVM's, or the Spark Connect server's) is not 4.1.

    Raises
    ------
    PlatformError
        Naming the session's Spark version.
    """
    if not spark_supported(version):
        raise PlatformError(f"the Spark session runs Spark {version}; delta-backfill supports Spark 4.1 "
                            f"(verified with 4.1.4)")
