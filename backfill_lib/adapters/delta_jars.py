"""Delta's jars for the embedded local session: straight from the Ivy cache once a start has resolved them.

``delta.configure_spark_with_delta_pip`` puts ``io.delta:delta-spark_<spark>_<scala>:<delta>`` in
``spark.jars.packages``, and spark-submit then runs an Ivy resolution on every start (seconds,
and about 40 lines of ``:: resolving dependencies ::`` output), even when every jar is cached. Here the first start
still resolves through Ivy (the jars come from Maven Central into the Ivy cache), and the jars that resolution
put on ``spark.jars`` are remembered in a list beside the cache (``<ivy home>/delta-backfill-<package>.jars``).
Later starts pass those files as ``spark.jars`` and skip Ivy, as long as every one of them is still there and the
package is the same (a new delta-spark or pyspark names another package, and so another list); otherwise they
resolve again.

Only the embedded local default uses this: on ``spark-submit``, Databricks or EMR the platform supplies Delta and
the session it built is reused (:func:`backfill_lib.adapters.session.get_spark`).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: Spark options that change what an Ivy resolution returns: with any of them set, every start resolves.
RESOLUTION_OPTIONS = ("spark.jars.packages", "spark.jars.repositories", "spark.jars.ivySettings",
                      "spark.jars.excludes")
#: The one line a start that resolves prints instead of Ivy's output.
FETCHING_LINE = "fetching Delta jars from Maven Central (first start only): {package} into {ivy}"


def delta_package() -> str:
    """The Maven coordinate ``delta.configure_spark_with_delta_pip`` adds (delta-spark 3.x and 4.x pip package):
    ``io.delta:delta-spark_<Spark major.minor>_2.13:<delta-spark version>``, e.g.
    ``io.delta:delta-spark_4.1_2.13:4.4.0``."""
    from importlib.metadata import version

    import pyspark

    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_2.13:{version('delta_spark')}"


def ivy_home(options: dict[str, str]) -> Path:
    """The Ivy home spark-submit resolves into: ``spark.jars.ivy`` when set, else Spark 4's default
    ``~/.ivy2.5.2``."""
    configured = options.get("spark.jars.ivy")
    return Path(configured).expanduser() if configured else Path.home() / ".ivy2.5.2"


def jar_list_path(options: dict[str, str], package: str) -> Path:
    """Where the jars a resolution of ``package`` returned are listed (one absolute path a line)."""
    return ivy_home(options) / f"delta-backfill-{re.sub(r'[^A-Za-z0-9._-]', '_', package)}.jars"


def cached_jars(options: dict[str, str], package: str) -> list[str] | None:
    """The jars of an earlier resolution of ``package`` (absolute paths), or ``None`` when the start has to resolve:
    a resolution option is set, no list was written, or one of its files is gone or empty."""
    if any(options.get(key) for key in RESOLUTION_OPTIONS):
        return None
    try:
        jars = [line.strip() for line in jar_list_path(options, package).read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError):
        return None
    if not jars or not all(_is_jar(path) for path in jars):
        return None
    return jars


def remember_jars(options: dict[str, str], package: str, resolved: str) -> list[str]:
    """Write the jar list of ``package`` from ``resolved`` (the session's ``spark.jars`` after a resolution: a
    comma-separated list of ``file:`` URIs or paths), leaving out the jars the user's own ``spark.jars`` option
    named; returns the paths written (none, and nothing written, when a file is missing). The list is written
    to a temporary name and renamed, so a reader never sees half of it; a cache that cannot be written is
    skipped (the next start resolves again)."""
    own = {_local_path(p) for p in (options.get("spark.jars") or "").split(",") if p.strip()}
    jars = [path for path in (_local_path(p) for p in resolved.split(",") if p.strip()) if path not in own]
    if not jars or not all(_is_jar(path) for path in jars):
        return []
    target = jar_list_path(options, package)
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text("".join(f"{path}\n" for path in jars))
        temporary.replace(target)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
        return []
    return jars


def _local_path(uri: str) -> str:
    """The absolute local path of a ``file:`` URI or a path (other schemes as given)."""
    uri = uri.strip()
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return unquote(parts.path)
    return uri if parts.scheme else str(Path(uri).resolve())


def _is_jar(path: str) -> bool:
    try:
        return os.path.isabs(path) and path.endswith(".jar") and os.path.getsize(path) > 0
    except OSError:
        return False
