"""The SparkSession: reuse the cluster's, or build the embedded local default.

On a cluster (``spark-submit``, a Databricks job, an EMR step) the session the platform configured is reused
and only the session time zone is pinned. Locally, a session is built with Delta configured
(``io.delta:delta-spark_4.1_2.13`` in ``spark.jars.packages`` on the first start, resolved from Maven Central into
the Ivy cache; afterwards the cached jars on ``spark.jars``, with no resolution: :mod:`.delta_jars`), a warehouse
and an embedded Derby metastore under :attr:`Settings.home`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import signal
import sys
import threading
import time

from pyspark.sql import SparkSession

from backfill_lib.core.errors import HomeInUseError, IntakeError
from backfill_lib.core.platform import check_session_spark
from backfill_lib.core.settings import Settings

log = logging.getLogger(__name__)

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def has_session() -> bool:
    """Whether this process already has a Spark session (:func:`get_spark` would use it)."""
    return SparkSession.getActiveSession() is not None


def launched_by_spark_submit() -> bool:
    """Whether this process runs under ``spark-submit`` (or a platform's driver), whose JVM came first: it hands
    Python the gateway port in ``PYSPARK_GATEWAY_PORT``, which pyspark itself reads."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get_spark(settings: Settings, short_lived: bool = False) -> SparkSession:
    """Return the session to run on, building the local default if there is none.

    The session time zone is set to ``settings.time_zone`` in every mode; a run then switches it to its
    request's ``time_zone`` for as long as it runs (:func:`session_time_zone`). ``short_lived``: the caller reads
    metadata for seconds and exits (``backfill plan``, ``status``, ``history``); a local default built for it
    compiles with the JVM's C1 compiler only (:data:`SHORT_LIVED_JVM_OPTIONS`). A session that exists already, or
    the platform's, is used as it is.

    Raises
    ------
    PlatformError
        The session's Spark is not a supported release (:func:`backfill_lib.core.platform.check_session_spark`).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        spark = active
    elif launched_by_spark_submit():
        spark = SparkSession.builder.appName(settings.spark.app_name).getOrCreate()
    else:
        spark = build_local_session(settings, short_lived=short_lived)
    check_session_spark(spark.version)
    spark.conf.set(SESSION_TIME_ZONE, settings.time_zone)
    # Delta's SQL parser drops named parameters under Spark 4.1 (delta-io/delta#7640, apache/spark#55392), so
    # `:range_start` in a source SQL would stay unbound; the legacy substitution binds them before parsing.
    spark.conf.set("spark.sql.legacy.parameterSubstitution.constantsOnly", "true")
    _keep_file_lists_out_of_checksums(spark)
    return spark


#: pyspark's loggers that write every error it converts, with a query context, as a multi-KB JSON record with
#: the Java stack trace: one for errors raised in SQL text, one for errors raised in DataFrame expressions.
QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def quiet_spark_query_errors() -> None:
    """Silence pyspark's query-context loggers (:data:`QUERY_CONTEXT_LOGGERS`) for this process.

    Our errors are reported once, as one line. They must stay ``PySparkLogger`` objects (they are called with extra
    keyword arguments a plain ``logging.Logger`` rejects), so they are fetched through pyspark.
    """
    from pyspark.logger import PySparkLogger

    for name in QUERY_CONTEXT_LOGGERS:
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


#: The Spark conf of the session time zone: the zone SQL turns timestamps into dates, hours and text in
#: (``to_date(ts)``, ``hour(ts)``, ``CAST(ts AS STRING)``), fixed in each expression when its query is analysed.
SESSION_TIME_ZONE = "spark.sql.session.timeZone"


def case_sensitive(spark: SparkSession | None = None) -> bool:
    """Whether ``spark`` (default: the active session; none: Spark's default) resolves column and table names
    case-sensitively (``spark.sql.caseSensitive``, off by default)."""
    spark = spark or SparkSession.getActiveSession()
    if spark is None:
        return False
    return str(spark.conf.get("spark.sql.caseSensitive", "false")).strip().lower() == "true"


@contextlib.contextmanager
def session_time_zone(spark: SparkSession, zone: str, at: str):
    """Run the block with the session time zone ``zone`` (an IANA name), then put back the zone it had.

    Every SQL the block analyses derives local dates and hours in ``zone``; a DataFrame analysed before keeps
    the zone it was analysed in (Spark fixes it in each expression at analysis). The conf belongs to the
    session, not the thread: every thread of the session sees ``zone`` meanwhile, so callers switch only where
    no other thread analyses SQL that depends on the zone.

    Raises
    ------
    IntakeError
        When the session refuses ``zone`` (a zone the JVM's time-zone database lacks, or a platform that does not
        let the zone change), naming ``at`` (the request or run), both zones and Spark's reason; the session
        keeps its zone and nothing has been written.
    """
    previous = spark.conf.get(SESSION_TIME_ZONE)
    if previous == zone:
        yield
        return
    try:
        spark.conf.set(SESSION_TIME_ZONE, zone)
        taken = spark.conf.get(SESSION_TIME_ZONE)
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise IntakeError(f"{at}: time_zone {zone}: the Spark session (time zone {previous}) cannot run in it: "
                          f"{reason}; nothing written") from exc
    if taken != zone:
        with contextlib.suppress(Exception):
            spark.conf.set(SESSION_TIME_ZONE, previous)
        raise IntakeError(f"{at}: time_zone {zone}: the Spark session (time zone {previous}) cannot run in it: "
                          f"it kept time zone {taken}; nothing written")
    try:
        yield
    finally:
        spark.conf.set(SESSION_TIME_ZONE, previous)


class CommitConfsGate:
    """Keeps ledger commits out of the window in which a commit's session confs are set.

    A publish sets Delta's ``userMetadata``, idempotent-write ``txnAppId`` / ``txnVersion`` and auto compaction
    off on the whole session (:func:`backfill_lib.publish.commit.session_confs`), which the ledger's writer
    thread shares: a ledger INSERT in that window committed with the publish's ``txnAppId`` and version, and
    Delta silently skipped the next such ledger commit. ``confs_set()`` is exclusive; ``ledger_commit()`` is
    shared (the ledger's tables commit at once) and waits while confs are set."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._commits = 0
        self._confs_set = False

    @contextlib.contextmanager
    def confs_set(self):
        with self._cond:
            while self._confs_set or self._commits:
                self._cond.wait()
            self._confs_set = True
        try:
            yield
        finally:
            with self._cond:
                self._confs_set = False
                self._cond.notify_all()

    @contextlib.contextmanager
    def ledger_commit(self):
        with self._cond:
            while self._confs_set:
                self._cond.wait()
            self._commits += 1
        try:
            yield
        finally:
            with self._cond:
                self._commits -= 1
                self._cond.notify_all()


#: The process's one gate (one per process: every session of it shares the confs' owner, the SparkContext)
COMMIT_CONFS = CommitConfsGate()


#: Delta conf: store a small table's file list in each commit's checksum (``.crc``) file.
ALL_FILES_IN_CRC = "spark.databricks.delta.allFilesInCrc.enabled"


def _keep_file_lists_out_of_checksums(spark: SparkSession) -> None:
    """Turn off Delta's file list in checksum files, unless the session was launched with it set.

    Delta 4.x stores a small table's file list in each commit's ``.crc`` file and, when the session, JVM or
    system time zone is not UTC, verifies that list with a full log replay on every commit
    (``allFilesInCrc.verificationMode.forceOnNonUTC.enabled``, on by default; ``Snapshot``'s
    ``allFilesInCrcVerificationForceEnabled`` in delta-spark 4.4.0). Our sessions run in the settings' time zone,
    so every ledger or staging commit paid two extra Spark jobs: an ``INSERT`` of one ledger row took 1.4-1.8 s
    instead of 0.35-0.6 s (``America/New_York``, local[2]). Without the list Delta reads the log as it did
    before the feature; nothing else changes. A platform that refuses the key (a Spark Connect or serverless
    session) keeps its default.
    """
    try:
        if spark.sparkContext.getConf().contains(ALL_FILES_IN_CRC):
            return
    except Exception:  # no SparkContext on Spark Connect
        pass
    try:
        spark.conf.set(ALL_FILES_IN_CRC, "false")
    except Exception as exc:
        log.info("kept Delta's %s: the session refused it (%s)", ALL_FILES_IN_CRC, str(exc).splitlines()[0])


# Spark's defaults with WARN as the floor, and two loggers that report harmless internals as ERROR: the Hive
# metastore cannot store a Delta table's schema in Hive format (Delta keeps it in its log), and Delta logs a
# replaceWhere mismatch that we turn into one clear error.
LOG4J2_PROPERTIES = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.hivealter.name = org.apache.hadoop.hive.metastore.HiveAlterHandler
logger.hivealter.level = off
logger.hmshandler.name = org.apache.hadoop.hive.metastore.RetryingHMSHandler
logger.hmshandler.level = off
logger.hiveexternal.name = org.apache.spark.sql.hive.HiveExternalCatalog
logger.hiveexternal.level = error
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = off
logger.tasksetmanager.name = org.apache.spark.scheduler.TaskSetManager
logger.tasksetmanager.level = off
logger.deltawriter.name = org.apache.spark.sql.delta.files.DeltaFileFormatWriter
logger.deltawriter.level = off
logger.fileformatwriter.name = org.apache.spark.sql.execution.datasources.FileFormatWriter
logger.fileformatwriter.level = off
# under heavy load these two log a block manager registration race (NullPointerException in BlockManagerMasterEndpoint.register) as ERROR, with a JVM stack trace on the terminal
logger.rpcinbox.name = org.apache.spark.rpc.netty.Inbox
logger.rpcinbox.level = off
logger.blockmanagermaster.name = org.apache.spark.storage.BlockManagerMasterEndpoint
logger.blockmanagermaster.level = off
"""


@contextlib.contextmanager
def _jvm_ignores_sigterm():
    """Launch the local JVM with SIGTERM ignored, so a SIGTERM to the whole process group (what Airflow,
    Kubernetes and systemd send) reaches the driver alone: the driver cancels between batches and stops Spark
    itself, instead of losing its JVM mid-run.

    pyspark's gateway launch (``java_gateway.launch_gateway``) ignores only SIGINT in the child. A disposition
    of ``SIG_IGN`` survives ``fork`` and ``exec`` (bash, which ``spark-submit`` is, and HotSpot both keep a
    SIGTERM ignored at their start ignored), so the driver ignores SIGTERM while the JVM is launched. It also
    blocks SIGTERM meanwhile (main thread), so one sent during the launch stays pending instead of being lost
    and is delivered to the driver's own handler when both are restored. The JVM dies, as before, when the
    driver's end of its stdin closes.
    """
    if threading.current_thread() is not threading.main_thread():  # signal.signal works in the main thread only
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


#: JVM options of a short-lived local session: C1 only (no C2 optimising compiler). On 2 cores the C2 compiler
#: threads spent most of a dry run's CPU compiling start-up code that never runs again, about half of it.
#: Not for runs: their generated code runs for minutes and needs C2. C1 alone reserves a 48 MB code cache, which a
#: run's generated code fills within a minute (the JVM then stops compiling and warns on stderr): 240 MB, the
#: tiered default, keeps any longer use compiling.
SHORT_LIVED_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


#: Spark options of a short-lived local session, over the settings' own: its queries read Delta logs and file
#: metadata only (a few KB), where adaptive execution splits each into one job per query stage and re-plans it,
#: more than doubling the jobs of a dry run for the same plan.
SHORT_LIVED_OPTIONS = {"spark.sql.adaptive.enabled": "false"}


#: seconds a start waits for the holder of a home's Derby lock whose driver has gone (a JVM still exiting)
EXITING_HOLDER_WAIT_SECONDS = 60.0
#: seconds a start waits for a holder whose driver is still alive (one finishing its exit) before refusing
LIVE_HOLDER_WAIT_SECONDS = 3.0


def _lock_holder(handle) -> int | None:
    """The process ID holding a POSIX lock that conflicts with an exclusive lock of the whole open file ``handle``
    (``F_GETLK``; Derby's ``FileChannel.tryLock`` takes such a lock), ``None`` when none does or it cannot be told
    (``struct flock`` is read in Linux's layout only)."""
    import fcntl
    import struct

    if not sys.platform.startswith("linux"):
        return None

    query = struct.pack("hhqqii", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0, 0)  # struct flock, 64-bit Linux
    try:
        kind, _, _, _, pid, _ = struct.unpack("hhqqii", fcntl.fcntl(handle.fileno(), fcntl.F_GETLK, query))
    except OSError:
        return None
    return None if kind == fcntl.F_UNLCK else pid


def _parent_alive(pid: int) -> bool:
    """Whether the parent of process ``pid`` (the Python driver that launched a JVM) is still running: a JVM whose
    driver has gone is exiting (its stdin closed). ``False`` when ``pid`` itself is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            parent = int(stat_file.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    if parent <= 1:
        return False
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def refuse_a_home_in_use(settings: Settings) -> None:
    """Refuse to start the local default on a home another live process has open; wait for one that is exiting.

    Derby holds a lock on ``metastore_db/dbex.lck`` while a JVM has the metastore booted; a second JVM on the same
    home fails only at its first catalog read, after tens of thousands of lines of Derby and DataNucleus stack
    traces. The lock is tested (taken and at once released) before any JVM starts. A holder whose driver has gone
    (a JVM still running its shutdown after the command that started it returned) is waited for, up to
    :data:`EXITING_HOLDER_WAIT_SECONDS`; a holder whose driver is alive for :data:`LIVE_HOLDER_WAIT_SECONDS`
    (a driver waiting for its own JVM to exit). Two processes starting in the same instant can still both pass.

    Raises
    ------
    HomeInUseError
        When another process still holds the lock after those waits, naming the home, the metastore folder and
        the holder's process ID.
    """
    import fcntl

    lock = settings.metastore_dir / "dbex.lck"
    try:
        handle = open(lock, "rb+")
    except OSError:
        return  # no metastore yet, or none booted since the folder was made
    with handle:
        started = time.monotonic()
        while True:
            try:
                fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _lock_holder(handle)
                waited = time.monotonic() - started
                exiting = holder is not None and not _parent_alive(holder)
                limit = EXITING_HOLDER_WAIT_SECONDS if exiting else LIVE_HOLDER_WAIT_SECONDS
                if waited < limit:
                    time.sleep(0.2)
                    continue
                by = f"process {holder}" if holder else "another process"
                raise HomeInUseError(
                    f"home {settings.home.resolve()} is in use by {by}: its Derby metastore "
                    f"({settings.metastore_dir}) admits one process at a time; wait for that process to end, or give "
                    "this one another home (BACKFILL_HOME) or a shared metastore (metastore_url in the settings)"
                ) from None
            fcntl.lockf(handle, fcntl.LOCK_UN)
            return


#: The driver's Java options the embedded default always sets (before any of the settings')
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
CODEGEN_CACHE = "spark.sql.codegen.cache.maxEntries"
CODEGEN_CACHE_ENTRIES = "1000"

#: Delta conf: how many partitions (Spark tasks) rebuild a table version's file list from its log
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"
#: Spark conf: at most how many tasks list a folder tree in parallel (``VACUUM``; a source of many partitions)
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def local_threads(master: str) -> int | None:
    """The task threads of a local ``master``: ``local`` 1, ``local[N]`` and ``local[N,F]`` N, ``local[*]`` the
    machine's CPUs; ``None`` for any other master (``local-cluster[...]``, a cluster URL)."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master.strip())
    if m is None:
        return None
    threads = m.group(1) or "1"
    return (os.cpu_count() or 1) if threads == "*" else max(int(threads), 1)


def sized_for_local(master: str) -> dict[str, str]:
    """Delta and Spark defaults sized for a local master's few threads instead of a cluster's many.

    Delta rebuilds a version's file list (``RESTORE``, ``VACUUM``, ``OPTIMIZE``, reading an older version) in 50
    tasks, and ``VACUUM`` lists the table's folders in up to 10,000: on a local master, which runs a few at a
    time, a ``RESTORE`` or ``VACUUM`` of a small table spent nearly all its time starting hundreds of tasks. One
    task per thread does the same work. Empty for a master that is not local; the settings' own Spark options
    override both.
    """
    threads = local_threads(master)
    if threads is None:
        return {}
    return {SNAPSHOT_PARTITIONS: str(threads), LISTING_PARALLELISM: str(max(threads, 2))}


def local_session_options(settings: Settings, short_lived: bool = False) -> dict[str, str]:
    """The Spark options the embedded default starts with, before Delta's jars and the class archive are added.

    The settings' ``spark.options`` override the defaults, except ``spark.driver.extraJavaOptions``: the settings'
    Java options come after the product's own (Derby's system home and the log4j file under ``settings.home``; a
    ``-D`` given twice takes the last value), not instead of them, since without those Derby writes ``derby.log``
    into the working folder and the JVM prints Spark's INFO lines. With ``settings.metastore_url`` the catalog is
    that PostgreSQL database (:func:`backfill_lib.adapters.metastore.metastore_options`) instead of Derby. Spark
    keeps up to :data:`CODEGEN_CACHE_ENTRIES` generated classes, so a session's later runs reuse the classes of
    its earlier ones. A local master also gets :func:`sized_for_local`. ``short_lived`` appends
    :data:`SHORT_LIVED_JVM_OPTIONS` after both and sets :data:`SHORT_LIVED_OPTIONS`. Pure: reads no file.
    """
    home = settings.home.resolve()
    options = {
        "spark.master": settings.spark.master,
        "spark.app.name": settings.spark.app_name,
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.sql.warehouse.dir": str(settings.warehouse_dir),
        SESSION_TIME_ZONE: settings.time_zone,
        # Batches run as concurrent jobs; FAIR shares the executors between them instead of first-come.
        "spark.scheduler.mode": "FAIR",
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={settings.metastore_dir};create=true",
        # Derby writes derby.log into its system home; keep it inside the project folder, not the cwd.
        JAVA_OPTIONS: f"-Dderby.system.home={home} -Dlog4j.configurationFile={home / 'log4j2.properties'}",
        "spark.sql.catalogImplementation": "hive",  # what SparkSession.Builder.enableHiveSupport sets
        # One run compiles well over Spark's default of 100 generated classes: with the default, a session's next
        # run finds none of them cached and compiles them all again.
        CODEGEN_CACHE: CODEGEN_CACHE_ENTRIES,
    }
    options.update(sized_for_local(settings.spark.master))
    if settings.metastore_url:
        from backfill_lib.adapters.metastore import metastore_options

        options.update(metastore_options(settings.metastore_url))
    own_java_options = options[JAVA_OPTIONS]
    options.update(settings.spark.options)
    java_options = [own_java_options, settings.spark.options.get(JAVA_OPTIONS, "")]
    if short_lived:
        java_options.append(SHORT_LIVED_JVM_OPTIONS)
        options.update(SHORT_LIVED_OPTIONS)
    options[JAVA_OPTIONS] = " ".join(o.strip() for o in java_options if o.strip())
    return options


def build_local_session(settings: Settings, short_lived: bool = False) -> SparkSession:
    """Build the embedded default: local master, Delta, warehouse and Derby metastore under ``settings.home``;
    ``short_lived`` adds :data:`SHORT_LIVED_JVM_OPTIONS` after the driver's Java options (the settings' own too)
    and sets :data:`SHORT_LIVED_OPTIONS`. Classes come from a class data sharing archive once one is written
    (:mod:`backfill_lib.adapters.jvm_archive`; a short-lived start writes it as its JVM exits).

    On a local master, Hadoop's local file system for ``file:`` paths sets modes and reads links without
    starting processes (:mod:`backfill_lib.adapters.local_fs`). Delta's jars come from the Ivy cache once a start has resolved them (:mod:`backfill_lib.adapters.delta_jars`);
    a start that resolves prints one line saying so on stderr instead of Ivy's report. The JVM's stderr reaches
    ours without the launch's noise (:mod:`backfill_lib.adapters.jvm_output`).
    """
    from backfill_lib.adapters.delta_jars import (
        FETCHING_LINE, RESOLUTION_OPTIONS, cached_jars, delta_package, ivy_home, remember_jars,
    )
    from backfill_lib.adapters.local_fs import quiet_local_fs_options

    options = local_session_options(settings, short_lived)
    if settings.metastore_url:  # a shared metastore: other processes on this home are expected
        from backfill_lib.adapters.metastore import prepare_metastore

        prepare_metastore(settings, options)
    else:
        refuse_a_home_in_use(settings)
    settings.warehouse_dir.mkdir(parents=True, exist_ok=True)
    log4j = settings.home.resolve() / "log4j2.properties"
    if not log4j.exists() or log4j.read_text() != LOG4J2_PROPERTIES:
        partial = log4j.with_name(f"{log4j.name}.{os.getpid()}.part")
        partial.write_text(LOG4J2_PROPERTIES)
        partial.replace(log4j)  # whole or not at all, for a JVM of another process reading it now
    if local_threads(options["spark.master"]) is not None:  # executors elsewhere would not have the jar
        # before the class archive's options: its name follows the class path the jar joins
        options.update(quiet_local_fs_options(options))
    package = delta_package()
    jars = cached_jars(options, package)
    resolved_by_user = any(options.get(key) for key in RESOLUTION_OPTIONS)
    archive = None
    if jars is not None:
        own = options.get("spark.jars")
        options["spark.jars"] = ",".join(([own] if own else []) + jars)
        # classes mapped from a CDS archive (a start that resolves jars first has none of its own)
        archive = _with_class_archive(options, create=short_lived)
    else:
        # what configure_spark_with_delta_pip sets, beside the settings' own packages: resolved by spark-submit
        options["spark.jars.packages"] = ",".join(p for p in (package, options.get("spark.jars.packages")) if p)
        line = (f"resolving {options['spark.jars.packages']} with Ivy (the settings set spark.jars options)"
                if resolved_by_user else FETCHING_LINE.format(package=package, ivy=ivy_home(options)))
        print(line, file=sys.stderr, flush=True)
    with _jvm_ignores_sigterm():
        proc = _launch_jvm(options)
        if proc is not None and archive is not None:  # this JVM writes the archive as it exits
            from backfill_lib.adapters.jvm_archive import finish_at_exit

            finish_at_exit(proc, archive)
        elif proc is not None:
            atexit.register(release_home_at_exit, proc)
        if proc is not None:  # registered last, so it runs first: Spark stops before its JVM is ended
            atexit.register(stop_spark_at_exit)
        builder = SparkSession.builder
        for key, value in options.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if jars is None and not resolved_by_user:
        remember_jars(options, package, spark.sparkContext.getConf().get("spark.jars", ""))
    log.debug("local Spark %s on %s, warehouse %s", spark.version, settings.spark.master, settings.warehouse_dir)
    return spark


#: seconds this process's exit waits for its JVM to end (and so release the home's Derby lock)
JVM_EXIT_WAIT_SECONDS = 60


def stop_spark_at_exit() -> None:
    """Stop this process's SparkContext, if one is active, waiting up to :data:`JVM_EXIT_WAIT_SECONDS`: its
    accumulator server and the JVM's jobs end cleanly before the JVM is told to exit (a JVM exiting under a live
    context makes pyspark print an ``EOFError`` traceback)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return
    # py4j logs a retried command on the root logger at INFO ("Exception while sending command."): one that meets
    # a connection the stopping JVM closed is retried and succeeds; the command's own output is complete by now.
    logging.disable(logging.INFO)
    def stop() -> None:
        with contextlib.suppress(Exception):
            context.stop()

    stopper = threading.Thread(target=stop, name="stop-spark", daemon=True)
    stopper.start()
    stopper.join(JVM_EXIT_WAIT_SECONDS)


def release_home_at_exit(proc) -> None:
    """End the JVM ``proc`` by closing its stdin (as pyspark's exit does) and wait, up to
    :data:`JVM_EXIT_WAIT_SECONDS`, for it to exit: a command returns only once its JVM has let go of the home's
    Derby metastore, so the next command typed after it finds the home free."""
    # py4j logs on the root logger when a command meets the ended JVM (a finalizer's at interpreter exit)
    logging.disable(logging.ERROR)
    with contextlib.suppress(Exception):
        proc.stdin.close()
    with contextlib.suppress(Exception):
        proc.wait(timeout=JVM_EXIT_WAIT_SECONDS)


def _with_class_archive(options: dict[str, str], create: bool):
    """Append the class data sharing options (:mod:`backfill_lib.adapters.jvm_archive`) to the driver's Java
    options in ``options``; returns the archive file the JVM writes at exit, or ``None`` (mapping one, or none)."""
    from backfill_lib.adapters.jvm_archive import archive_options

    java_options, temporary = archive_options(options, create=create)
    if java_options:
        current = options.get("spark.driver.extraJavaOptions", "")
        options["spark.driver.extraJavaOptions"] = f"{current} {java_options}".strip()
    return temporary


def _launch_jvm(options: dict[str, str]):
    """Start the JVM (spark-submit, as pyspark does) with ``options`` and its stderr through a
    :class:`~backfill_lib.adapters.jvm_output.JvmStderr`; pyspark's ``SparkContext`` then uses this gateway.
    Returns the launched process (``Popen``).

    Nothing happens when this process already has a JVM (a session stopped and built again): pyspark reuses it,
    and ``None`` is returned.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    from backfill_lib.adapters.jvm_output import JvmStderr

    if SparkContext._gateway is not None:
        return None
    conf = SparkConf()
    for key, value in options.items():
        conf.set(key, value)
    stderr = JvmStderr()
    try:
        # popen_kwargs: pyspark's documented hook for the gateway's stdout/stderr
        gateway = launch_gateway(conf, popen_kwargs={"stderr": stderr.write_fd})
    except BaseException:
        stderr.flush_held()
        raise
    stderr.close_writer()
    SparkContext._ensure_initialized(gateway=gateway)
    return getattr(gateway, "proc", None)
