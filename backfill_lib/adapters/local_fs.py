"""The embedded default's local file system: Hadoop's, without a process started per file.

Without Hadoop's native library (pyspark ships none), Hadoop's local file system sets the mode of every file and
folder it creates by starting ``chmod``, and a FileContext rename (how Delta commits a log entry) starts
``readlink`` for each path it checks: a Delta commit of one file starts about 36 processes, a write of 365
partitions over a thousand, each a few milliseconds of CPU.

The Java classes in ``adapters/java`` (``deltabackfill.hadoop``) are Hadoop's checksummed local file systems
(``LocalFileSystem`` for the FileSystem API, ``LocalFs`` for FileContext) with those two calls made in Java; every
other call is Hadoop's own, and the files, modes and checksums written are the same. They are compiled once, with
the Janino compiler that Spark ships (Spark compiles its generated code with it), into a jar in the JVM cache
folder (:func:`~backfill_lib.adapters.jvm_archive.archive_dir`), named by a hash of the sources and the Spark
installation, then put on the driver's class path of every local start.

When the cache folder is turned off, the jar cannot be built or the settings choose a file system for ``file:``
themselves, nothing changes: Hadoop's own classes start their processes as before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import tempfile
import zipfile
from pathlib import Path

log = logging.getLogger(__name__)

#: the FileSystem API's class for ``file:`` paths
FILE_SYSTEM = "spark.hadoop.fs.file.impl"
#: FileContext's class for ``file:`` paths (Delta's log store renames through it)
ABSTRACT_FILE_SYSTEM = "spark.hadoop.fs.AbstractFileSystem.file.impl"
CLASS_PATH = "spark.driver.extraClassPath"
QUIET_FILE_SYSTEM = "deltabackfill.hadoop.QuietLocalFileSystem"
QUIET_ABSTRACT_FILE_SYSTEM = "deltabackfill.hadoop.QuietLocalFs"
#: Janino's command-line compiler (commons-compiler, on Spark's class path)
COMPILER = "org.codehaus.commons.compiler.samples.CompilerDemo"
#: seconds the one-time compilation may take before the start goes on without it
COMPILE_TIMEOUT_SECONDS = 120

SOURCES = Path(__file__).with_name("java")


def _spark_jars() -> Path:
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)) / "jars"


def jar_path(folder: Path) -> Path:
    """The jar in ``folder``: named by a hash of the Java sources and the Spark installation (its Hadoop)."""
    import pyspark

    digest = hashlib.sha256(f"{_spark_jars()}\n{pyspark.__version__}\n".encode())
    for source in sorted(SOURCES.glob("*.java")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return folder / f"local-fs-{digest.hexdigest()[:16]}.jar"


def build_jar(target: Path) -> Path | None:
    """Compile the sources into ``target`` (through a temporary file renamed into place, so a concurrent start
    never reads half a jar). Returns ``target``, or ``None`` when compilation failed (logged at debug level)."""
    from backfill_lib.adapters.jvm_archive import _java_binary

    jars = _spark_jars()
    class_path = os.pathsep.join(str(j) for j in sorted(jars.glob("*.jar")))
    with tempfile.TemporaryDirectory(prefix="backfill-local-fs-") as out:
        command = [_java_binary(), "-cp", str(jars / "*"), COMPILER, "-d", out, "-classpath", class_path,
                   *(str(s) for s in sorted(SOURCES.glob("*.java")))]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.debug("local file system classes not compiled: %s", exc)
            return None
        classes = sorted(Path(out).rglob("*.class"))
        if done.returncode != 0 or not classes:
            log.debug("local file system classes not compiled (exit %s): %s", done.returncode, done.stderr[-2000:])
            return None
        partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        try:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
                for c in classes:
                    jar.write(c, c.relative_to(out).as_posix())
            os.chmod(partial, 0o600)
            os.replace(partial, target)
        except OSError as exc:
            log.debug("local file system jar not written: %s", exc)
            partial.unlink(missing_ok=True)
            return None
    return target


def quiet_local_fs_options(options: dict[str, str]) -> dict[str, str]:
    """The Spark options that give ``options`` (a local start's) the quiet local file systems: both classes and
    the jar appended to the driver's class path, building the jar first if this is the first start to need it.
    ``{}`` when ``options`` already name a class for either, the cache folder is off or unusable, or the jar
    cannot be built."""
    from backfill_lib.adapters.jvm_archive import _own_and_private, archive_dir

    if options.get(FILE_SYSTEM) or options.get(ABSTRACT_FILE_SYSTEM):
        return {}
    folder = archive_dir()
    if folder is None:
        return {}
    target = jar_path(folder)
    if not _own_and_private(target):  # a jar is code: only one of this user's that no one else may write
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            return {}
        if build_jar(target) is None or not _own_and_private(target):
            return {}
    own = options.get(CLASS_PATH)
    return {FILE_SYSTEM: QUIET_FILE_SYSTEM, ABSTRACT_FILE_SYSTEM: QUIET_ABSTRACT_FILE_SYSTEM,
            CLASS_PATH: os.pathsep.join([*([own] if own else []), str(target)])}
