"""Class data sharing for the embedded local JVM: the classes a dry run loads, mapped from an archive.

A local start reads, verifies and links the classes of Spark, Hive's metastore client and Delta from jars, on
every start. HotSpot's dynamic class data sharing archive (JDK 13+, ``-XX:ArchiveClassesAtExit`` /
``-XX:SharedArchiveFile``; JDK 19's ``-XX:+AutoCreateSharedArchive`` is not in Java 17) holds those classes
already parsed and verified, and a start maps it instead, which takes a large part of a short command's start
off (the measurements are in the commit that added it).

- The first short-lived start (``backfill plan``, ``status``, ``history``) without an archive writes one when its
  JVM exits: to a temporary file of its own, renamed into place only after the JVM exited with status 0
  (:func:`finish_at_exit`), so a reader never maps half an archive and concurrent writers do not clash. That
  process's exit waits for the dump (once).
- Every later local start (all commands) maps it. The JVM checks the archive against its own version and class
  path and, on any mismatch or damage, starts without it (slower, never different); its CDS log lines are off
  (``-Xlog:cds*=off``), so nothing is printed either way.

The archive is keyed by the Java binary, the Spark installation and the session's extra jars
(:func:`archive_path`); it lives in ``$BACKFILL_JVM_ARCHIVE`` (a folder; ``off`` turns the archive off), by default
``$XDG_CACHE_HOME/delta-backfill/jvm`` or ``~/.cache/delta-backfill/jvm``, a folder of this user only (mode 700);
an archive another user owns or others may write is not mapped. About 200 MB for Spark 4.1 with Delta 4.4; a start
that writes one removes those no start has mapped for :data:`UNUSED_DAYS` days.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import stat
import time
from pathlib import Path

#: The folder of the archives, or ``off`` (also ``0``, ``false``, ``no``) for no archive.
ARCHIVE_ENV = "BACKFILL_JVM_ARCHIVE"
#: HotSpot's CDS log (warnings go to stdout by default): off, so a mismatched archive is skipped silently.
QUIET_CDS = "-Xlog:cds*=off"
#: seconds :func:`finish_at_exit` waits for the JVM to write the archive before leaving it unfinished
DUMP_TIMEOUT_SECONDS = 300
#: days after its last use (its modification time, set by every start that maps it) an archive is removed by
#: the next start that writes one: each Java, Spark or virtual environment gets its own, about 200 MB
UNUSED_DAYS = 14


def archive_dir() -> Path | None:
    """The folder of the archives (see the module docstring), or ``None`` when turned off."""
    configured = os.environ.get(ARCHIVE_ENV)
    if configured is not None:
        if configured.strip().lower() in ("", "off", "0", "false", "no"):
            return None
        return Path(configured).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "delta-backfill" / "jvm"


def _java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    found = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java") or "java"
    return os.path.realpath(found)


def archive_path(folder: Path, options: dict[str, str]) -> Path:
    """The archive in ``folder`` for a JVM started with ``options`` (Spark options): named by a hash of the Java
    binary (path, size and time), the Spark installation (``SPARK_HOME`` or pyspark's) and the jars the options
    add (the driver's class path with each entry's modification time), so another Java, Spark or Delta, or a
    class path jar rebuilt, gets its own archive."""
    import pyspark

    java = _java_binary()
    with contextlib.suppress(OSError):
        info = os.stat(java)
        java = f"{java}:{info.st_size}:{info.st_mtime_ns}"
    spark_home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    class_path = [p for p in options.get("spark.driver.extraClassPath", "").split(os.pathsep) if p]
    # the JVM checks each class path jar's time too: one rebuilt in place would fail every later check
    class_path = [f"{p}:{_mtime_ns(p)}" for p in class_path]
    parts = [java, spark_home, pyspark.__version__, options.get("spark.jars", ""), os.pathsep.join(class_path)]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return folder / f"classes-{key}.jsa"


def _mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _own_and_private(path: Path) -> bool:
    """Whether ``path`` is a regular file of this user that no one else may write (a mapped archive is code)."""
    try:
        info = path.stat()
    except OSError:
        return False
    return (stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and info.st_size > 0)


def archive_options(options: dict[str, str], create: bool) -> tuple[str, Path | None]:
    """The JVM options that map the archive for ``options``, or (``create``, none there yet) write it at exit.

    Returns ``(java_options, temporary)``: ``temporary`` is the file the JVM writes at its exit (pass it to
    :func:`finish_at_exit`), ``None`` when mapping, or when there is no archive and ``create`` is false, or the
    folder cannot be made (then ``java_options`` is empty).
    """
    folder = archive_dir()
    if folder is None:
        return "", None
    target = archive_path(folder, options)
    if _own_and_private(target):
        with contextlib.suppress(OSError):
            os.utime(target)  # used now (see UNUSED_DAYS); the JVM checks the archive's header, not its times
        return f"{QUIET_CDS} -XX:SharedArchiveFile={target}", None
    if not create:
        return "", None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            return "", None
    except OSError:
        return "", None
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    return f"{QUIET_CDS} -XX:ArchiveClassesAtExit={temporary}", temporary


def finish_archive(proc, temporary: Path) -> Path | None:
    """End the JVM ``proc`` (the gateway's ``spark-submit`` process, which execs the JVM) by closing its stdin, as
    pyspark's exit does, wait for it to write ``temporary`` and rename that to the archive's name (``temporary``
    without its ``.<pid>.tmp``). Returns the archive, or ``None`` when the JVM failed or took longer than
    :data:`DUMP_TIMEOUT_SECONDS` (then no file is left)."""
    target = temporary.with_name(temporary.name.split(".jsa.")[0] + ".jsa")
    try:
        with contextlib.suppress(Exception):
            proc.stdin.close()  # the gateway exits on EOF; the JVM writes the archive as it exits
        if proc.wait(timeout=DUMP_TIMEOUT_SECONDS) == 0 and _own_and_private(temporary):
            os.replace(temporary, target)
            prune_unused(target.parent)
            return target
    except Exception:  # a timeout, a file system error: no archive this time; the next short start tries again
        pass
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()
    return None


def prune_unused(folder: Path, days: float = UNUSED_DAYS) -> list[Path]:
    """Remove the archives (and archives left half-written) of ``folder`` that no start has used for ``days``
    days; returns them."""
    cutoff = time.time() - days * 86400
    removed = []
    for archive in [*folder.glob("classes-*.jsa"), *folder.glob("classes-*.jsa.*.tmp")]:
        with contextlib.suppress(OSError):
            if archive.stat().st_mtime < cutoff:
                archive.unlink()
                removed.append(archive)
    return removed


def finish_at_exit(proc, temporary: Path) -> None:
    """:func:`finish_archive` at this process's exit (before pyspark's own exit handlers)."""
    atexit.register(finish_archive, proc, temporary)
